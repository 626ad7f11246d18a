use std::arch::x86_64::*;
const MR: usize = 32; const NJ: usize = 12; const MV: usize = 2; const LANES: usize = 16;
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile(k: usize, a: *const u32, w: [*const u16; NJ], sums: &mut [[f32; MR]; NJ]) {
    let mut acc = [[_mm512_setzero_ps(); NJ]; MV];
    for q in 0..k/2 {
        let av: [__m512bh; MV] = std::array::from_fn(|v| std::mem::transmute(_mm512_loadu_si512(a.add(q * MR + v * LANES).cast())));
        for (t, wt) in w.iter().enumerate() {
            let b: __m512bh = std::mem::transmute(_mm512_set1_epi32(wt.add(2*q).cast::<u32>().read_unaligned() as i32));
            for (row, x) in acc.iter_mut().zip(&av) { row[t] = _mm512_dpbf16_ps(row[t], *x, b); }
        }
    }
    for (v, row) in acc.iter().enumerate() { for (t, s) in row.iter().enumerate() { _mm512_storeu_ps(sums[t][v*LANES..].as_mut_ptr(), *s); } }
}
#[target_feature(enable = "avx512f")]
unsafe fn ftile(k: usize, a: *const f32, w: [*const f32; NJ], sums: &mut [[f32; MR]; NJ]) {
    let mut acc = [[_mm512_setzero_ps(); NJ]; MV];
    for q in 0..k {
        let av: [__m512; MV] = std::array::from_fn(|v| _mm512_loadu_ps(a.add(q * MR + v * LANES)));
        for (t, wt) in w.iter().enumerate() {
            let b = _mm512_set1_ps(*wt.add(q));
            for (row, x) in acc.iter_mut().zip(&av) { row[t] = _mm512_fmadd_ps(*x, b, row[t]); }
        }
    }
    for (v, row) in acc.iter().enumerate() { for (t, s) in row.iter().enumerate() { _mm512_storeu_ps(sums[t][v*LANES..].as_mut_ptr(), *s); } }
}
fn main() {
    let k = 256usize;
    let a = vec![0x3f803f80u32; MR * k / 2]; let w = vec![0x3f80u16; NJ * k];
    let af = vec![1.0f32; MR * k]; let wf = vec![1.0f32; NJ * k];
    let mut s = [[0f32; MR]; NJ];
    let calls = 200_000;
    for _ in 0..3 {
    let t0 = std::time::Instant::now();
    for _ in 0..calls { unsafe { tile(k, a.as_ptr(), std::array::from_fn(|t| w[t*k..].as_ptr()), &mut s) }; std::hint::black_box(&s); }
    let e = t0.elapsed().as_secs_f64();
    println!("bf16 in L1: {:.1} GFLOP/s one thread", (2*MR*NJ*k*calls) as f64 / e / 1e9);
    let t0 = std::time::Instant::now();
    for _ in 0..calls { unsafe { ftile(k, af.as_ptr(), std::array::from_fn(|t| wf[t*k..].as_ptr()), &mut s) }; std::hint::black_box(&s); }
    let e = t0.elapsed().as_secs_f64();
    println!("f32 in L1: {:.1} GFLOP/s one thread", (2*MR*NJ*k*calls) as f64 / e / 1e9);
    }
}
