// SPDX-License-Identifier: GPL-2.0

//! `/dev/zeronic`, the control device.
//!
//! Applications open it to query the NIC and, as the driver grows, to register
//! memory and run zero-copy transfers. Each open file owns a [`ControlFile`];
//! everything a file creates dies with it (close, exit, kill).
//!
//! The node is world-accessible (0666) as RDMA's uverbs nodes are: what a user
//! may do through it is bounded by per-user limits (`RLIMIT_MEMLOCK`), not by
//! file permissions.

use kernel::{
    fs::File,
    miscdevice::{
        MiscDevice,
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    task::Pid, //
};

/// Name of the device node under `/dev`.
pub(crate) const NAME: &CStr = c"zeronic";

/// ABI version of `uapi/linux/zeronic.h` this driver implements
/// (`ZERONIC_UAPI_VERSION` there).
pub(crate) const UAPI_VERSION: u32 = 1;

/// Permission bits of `/dev/zeronic` (see the module documentation).
const MODE: u16 = 0o666;

/// Returns the initializer that registers `/dev/zeronic`.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<ControlFile>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: NAME, mode: MODE })
}

/// State of one open file of `/dev/zeronic`.
///
/// Lifetime: created by `open`, dropped by `release` (last close of the file,
/// including on process exit or kill). It holds no reference to a PCI device,
/// because a file can outlive the device's binding.
pub(crate) struct ControlFile {
    /// Thread-group id of the process that opened the file, shown in fdinfo
    /// so that a file passed to another process can be traced to its owner.
    owner_tgid: Pid,
}

#[vtable]
impl MiscDevice for ControlFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let owner_tgid = current!().tgid();
        Ok(KBox::new(ControlFile { owner_tgid }, GFP_KERNEL)?)
    }

    fn show_fdinfo(this: &ControlFile, m: &SeqFile, _file: &File) {
        seq_print!(m, "zeronic-uapi:\t{}\n", UAPI_VERSION);
        seq_print!(m, "zeronic-owner-tgid:\t{}\n", this.owner_tgid);
    }
}
