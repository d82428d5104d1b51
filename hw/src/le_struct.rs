//! `le_struct!`: the one way a shared hardware layout is declared: a
//! `#[repr(C)]` struct of little-endian integer fields with byte-image
//! `decode`/`encode` and a build-time size pin.
//!
//! Included first, with `#[macro_use]`, by whoever includes `cmd.rs` and
//! `desc.rs` (the crate root here, the kernel module with `#[path]`), so the
//! macro is in scope for them.

/// Declares a `#[repr(C)]` little-endian layout with `SIZE`, `decode` and
/// `encode`, and pins its size.
macro_rules! le_struct {
    ($(#[$m:meta])* pub struct $name:ident ($size:literal) {
        $($(#[$fm:meta])* pub $f:ident : $t:ident,)*
    }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }

        impl $name {
            /// Size of the byte image.
            pub const SIZE: usize = $size;

            /// Reads the little-endian byte image.
            pub fn decode(b: &[u8; $size]) -> Self {
                let mut o = 0usize;
                $(
                    let $f = {
                        let mut a = [0u8; core::mem::size_of::<$t>()];
                        a.copy_from_slice(&b[o..o + core::mem::size_of::<$t>()]);
                        o += core::mem::size_of::<$t>();
                        $t::from_le_bytes(a)
                    };
                )*
                let _ = o;
                Self { $($f,)* }
            }

            /// Writes the little-endian byte image.
            pub fn encode(&self) -> [u8; $size] {
                let mut b = [0u8; $size];
                let mut o = 0usize;
                $(
                    let a = self.$f.to_le_bytes();
                    b[o..o + a.len()].copy_from_slice(&a);
                    o += a.len();
                )*
                let _ = o;
                b
            }
        }

        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        const _: () = assert!(0 $(+ core::mem::size_of::<$t>())* == $size);
    };
}
