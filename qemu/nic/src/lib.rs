//! Emulated ZeroNIC: the device model QEMU guests reach through an
//! `ivshmem-doorbell` PCI device. See `docs/hardware.md` for the interface.

pub mod accel;
pub mod cmdq;
pub mod csum;
pub mod ctl;
pub mod device;
pub mod flow;
pub mod frame;
pub mod irq;
pub mod keygen;
pub mod mem;
pub mod model;
pub mod mr;
pub mod prof;
pub mod ring;
pub mod rx;
pub mod server;
pub mod steer;
pub mod tx;
pub mod wire;

#[cfg(test)]
mod tests {
    /// The package is built with overflow checks in every profile (the
    /// workspace Cargo.toml): guest-supplied arithmetic that would wrap
    /// panics loudly instead of producing a wrong address.
    #[test]
    fn overflow_checks_are_on() {
        let wrapped = std::panic::catch_unwind(|| {
            std::hint::black_box(u32::MAX) + std::hint::black_box(1u32)
        });
        assert!(wrapped.is_err(), "u32::MAX + 1 did not panic");
    }
}
