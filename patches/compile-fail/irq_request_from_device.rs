// expect: error[E0599]
// Patch 0009: no request for "whatever vectors the device has", tied only to the device borrow.
use kernel::{device::Bound, irq::IrqRequest, pci};

fn request(pdev: &pci::Device<Bound>) -> Result<IrqRequest<'_>> {
    pdev.irq_vector(0)
}
