//! Stand-ins of [`super::tiles`] off x86-64, where [`super::supported`] is false and nothing calls them.

use super::Tile;

pub(super) unsafe fn configure() {
    unreachable!("the AMX GEMM runs only where super::supported()")
}

pub(super) unsafe fn release() {}

pub(super) unsafe fn gather_pairs(
    _: &[half::bf16],
    _: usize,
    _: usize,
    _: &mut [std::mem::MaybeUninit<Tile>],
) {
}

pub(super) unsafe fn store_sums(
    _: &Tile,
    _: &super::SharedOut,
    _: (usize, usize),
    _: (usize, usize),
    _: bool,
) {
}

pub(super) unsafe fn block(
    _: usize,
    _: impl Fn(usize, usize) -> (*const u8, usize),
    _: [*const Tile; 2],
    _: (usize, usize),
    _: &mut [Tile; 4],
    _: impl FnOnce(),
) {
}

pub(super) unsafe fn store_swiglu(
    _: [&Tile; 2],
    _: Option<(&[f32], &[f32])>,
    _: &super::SharedOut,
    _: (usize, usize),
    _: (usize, usize),
    _: bool,
) {
}
