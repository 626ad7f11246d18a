//! The built-in f32 GEMM: a row's bits independent of the other rows and of the threads, the tile the CPU runs.
use super::check::{matches_reference, rows_stand_alone, Kernel};
use super::*;

/// [`sgemm_nt_on`] with the tile of `isa`, as a [`Kernel`].
pub(super) fn on(isa: Isa) -> Kernel {
    match isa {
        Isa::Avx2 => |a, w, dims, c| sgemm_nt_on(Isa::Avx2, a, w, dims, c),
        Isa::Avx512 => |a, w, dims, c| sgemm_nt_on(Isa::Avx512, a, w, dims, c),
    }
}

/// Partial register tiles, several depth blocks (k > KC), several column blocks (n > NC), k = 0.
fn near_reference<M: Micro>(f: Kernel) {
    let (kc, nc) = (M::KC, M::NC);
    let shapes = [
        (1, 1, 1),
        (5, 7, 15),
        (M::MR, 16, M::NR),
        (M::MR + 1, kc + 1, M::NR + 1),
        (2 * M::MR + 1, 2 * kc + 5, 2 * M::NR + 1),
        (3, 20, nc + 18),
        (4, 0, 9),
    ];
    matches_reference(f, &shapes);
}

#[test]
fn matches_a_float64_reference_on_partial_tiles_and_several_blocks() {
    if check::skip_without_avx2() {
        return;
    }
    for isa in Isa::all_supported() {
        eprintln!("{isa:?}");
        match isa {
            Isa::Avx2 => near_reference::<Avx2>(on(isa)),
            Isa::Avx512 => near_reference::<Avx512>(on(isa)),
        }
    }
}

/// Rows 100..111 alone (another place in the tiles and row blocks), rows across the first row block's end,
/// and all rows on one thread.
fn rows_alone<M: Micro>(f: Kernel) {
    let parts = [100..111, M::MC - 3..M::MC + 4];
    rows_stand_alone(f, (2 * M::MC + 7, M::KC + 40, 70), &parts);
}

#[test]
fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
    if check::skip_without_avx2() {
        return;
    }
    for isa in Isa::all_supported() {
        eprintln!("{isa:?}");
        match isa {
            Isa::Avx2 => rows_alone::<Avx2>(on(isa)),
            Isa::Avx512 => rows_alone::<Avx512>(on(isa)),
        }
    }
}

#[test]
fn the_default_tile_is_the_widest_the_cpu_runs() {
    let Some(best) = Isa::detect() else {
        assert_eq!(BuiltinGemm::for_this_cpu(false), BuiltinGemm::GemmCrate);
        return;
    };
    assert_eq!(active(), Some(best));
    assert_eq!(BuiltinGemm::for_this_cpu(true), BuiltinGemm::GemmCrate);
    let builtin = BuiltinGemm::for_this_cpu(false);
    match best {
        Isa::Avx2 => assert_eq!(builtin, BuiltinGemm::Packed),
        Isa::Avx512 => assert_eq!(builtin, BuiltinGemm::GemmCrate),
    }
    let packed = BuiltinGemm::Packed.describe();
    assert!(packed.contains(&best.describe()), "{packed}");
    let (m, k, n) = (2 * MIN_ROWS.min(40) + 3, 300, 50);
    let (a, w) = (check::values(m * k, 7), check::values(n * k, 8));
    let want = check::product(on(best), &a, &w, (m, k, n));
    assert_eq!(check::product(sgemm_nt, &a, &w, (m, k, n)), want);
}
