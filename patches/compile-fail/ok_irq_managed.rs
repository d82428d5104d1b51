// expect: builds
// The correct use of patch 0009: requests from the handle of the managed vectors.
use kernel::{device::Bound, irq, pci};

struct Handler;

impl irq::Handler for Handler {
    fn handle(&self) -> irq::IrqReturn {
        irq::IrqReturn::Handled
    }
}

fn probe_irq<'bound>(
    pdev: &'bound pci::Device<Bound>,
) -> Result<Pin<KBox<irq::Registration<'bound, Handler>>>> {
    let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
    let vectors = pdev.alloc_irq_vectors_managed(1, 1, msix)?;
    // SAFETY: The registration is returned, to be kept in the driver's data, not leaked.
    let reg = unsafe {
        irq::Registration::new(
            vectors.index(0)?,
            irq::Flags::TRIGGER_NONE,
            c"example",
            Ok::<_, Error>(Handler),
        )
    };
    KBox::pin_init(reg, GFP_KERNEL)
}
