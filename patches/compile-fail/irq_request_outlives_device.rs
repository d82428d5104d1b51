// expect: error: lifetime may not live long enough
// Patch 0009: a request borrows the bound device, so its handler cannot outlive the binding.
use kernel::{device::Bound, irq::IrqRequest, pci};

fn request(pdev: &pci::Device<Bound>) -> Result<IrqRequest<'static>> {
    let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
    pdev.alloc_irq_vectors_managed(1, 1, msix)?.index(0)
}
