use rayon::prelude::*;
use std::arch::x86_64::*;
struct Out(*mut f32);
unsafe impl Send for Out {}
unsafe impl Sync for Out {}
fn tasks(n: usize, group: usize, min_rows: usize, task: impl Fn(std::ops::Range<usize>) + Sync + Send) {
    let per = min_rows.next_multiple_of(group).max(n.div_ceil(8 * rayon::current_num_threads()).next_multiple_of(group));
    let starts: Vec<usize> = (0..n).step_by(per).collect();
    starts.into_par_iter().for_each(|j0| task(j0..n.min(j0 + per)));
}
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn lanes_sum(v: __m512) -> f32 { _mm512_reduce_add_ps(v) }
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const TC: usize, const PF: usize>(k: usize, a: *const u16, w: [*const u16; TC], out: &mut [f32; 16]) {
    let mut acc = [_mm512_setzero_ps(); TC];
    let full = k - k % 32;
    let mut p = 0;
    while p < full {
        if PF > 0 { for wt in &w { _mm_prefetch::<_MM_HINT_T0>(wt.wrapping_add(PF * k + p).cast()); } }
        let x: __m512bh = std::mem::transmute(_mm512_loadu_si512(a.add(p).cast()));
        for t in 0..TC {
            let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(w[t].add(p).cast()));
            acc[t] = _mm512_dpbf16_ps(acc[t], x, wv);
        }
        p += 32;
    }
    for t in 0..TC { out[t] = lanes_sum(acc[t]); }
}
fn gemv<const TC: usize, const PF: usize>(a: &[u16], w: &[u16], k: usize, n: usize, c: &mut [f32]) {
    let out = Out(c.as_mut_ptr());
    tasks(n, TC, 32, |cols| unsafe {
        let o = &out;
        for j0 in cols.clone().step_by(TC) {
            let wr: [*const u16; TC] = std::array::from_fn(|t| w.as_ptr().add((j0 + t).min(cols.end - 1) * k));
            let mut s = [0f32; 16];
            tile::<TC, PF>(k, a.as_ptr(), wr, &mut s);
            for t in 0..TC.min(cols.end - j0) { *o.0.add(j0 + t) = s[t]; }
        }
    });
}
#[target_feature(enable = "avx2,fma")]
unsafe fn tile32<const TC: usize, const PF: usize>(k: usize, a: *const f32, w: [*const f32; TC], out: &mut [f32; 16]) {
    let mut acc = [_mm256_setzero_ps(); TC];
    let mut p = 0;
    while p + 8 <= k {
        if PF > 0 && p % 16 == 0 { for wt in &w { _mm_prefetch::<_MM_HINT_T0>(wt.wrapping_add(PF * k + p).cast()); } }
        let x = _mm256_loadu_ps(a.add(p));
        for t in 0..TC { acc[t] = _mm256_fmadd_ps(x, _mm256_loadu_ps(w[t].add(p)), acc[t]); }
        p += 8;
    }
    for t in 0..TC { let mut v = [0f32; 8]; _mm256_storeu_ps(v.as_mut_ptr(), acc[t]); out[t] = v.iter().sum(); }
}
fn gemv32<const TC: usize, const PF: usize>(a: &[f32], w: &[f32], k: usize, n: usize, c: &mut [f32]) {
    let out = Out(c.as_mut_ptr());
    tasks(n, TC, 24, |cols| unsafe {
        let o = &out;
        for j0 in cols.clone().step_by(TC) {
            let wr: [*const f32; TC] = std::array::from_fn(|t| w.as_ptr().add((j0 + t).min(cols.end - 1) * k));
            let mut s = [0f32; 16];
            tile32::<TC, PF>(k, a.as_ptr(), wr, &mut s);
            for t in 0..TC.min(cols.end - j0) { *o.0.add(j0 + t) = s[t]; }
        }
    });
}
const SHAPES: [(usize, usize); 4] = [(896, 1152), (896, 896), (896, 9728), (4864, 896)];
fn run<T>(name: &str, ws: &[Vec<T>], bytes: usize, f: &dyn Fn(usize, &[T], usize, usize)) {
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for (i, w) in ws.iter().enumerate() { let (k, n) = SHAPES[i % 4]; f(i, w, k, n); }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let total: usize = ws.iter().map(|w| w.len() * bytes).sum();
    println!("{name}: {:.1} ms {:.1} GB/s", best * 1e3, total as f64 / best / 1e9);
}
fn main() {
    let ws: Vec<Vec<u16>> = (0..96).map(|i| { let (k, n) = SHAPES[i % 4]; (0..k * n).map(|j| (0x3f00 + ((j * 7 + i) % 128)) as u16).collect() }).collect();
    let a: Vec<u16> = (0..4864).map(|j| (0x3f00 + j % 64) as u16).collect();
    let c = std::sync::Mutex::new(vec![0f32; 9728]);
    for _ in 0..2 {
    run("bf16 TC4", &ws, 2, &|_, w, k, n| gemv::<4, 0>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    run("bf16 TC4 pf1", &ws, 2, &|_, w, k, n| gemv::<4, 4>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    run("bf16 TC4 pf2", &ws, 2, &|_, w, k, n| gemv::<4, 8>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    run("bf16 TC8", &ws, 2, &|_, w, k, n| gemv::<8, 0>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    run("bf16 TC8 pf1", &ws, 2, &|_, w, k, n| gemv::<8, 8>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    }
    drop(ws);
    let ws: Vec<Vec<f32>> = (0..96).map(|i| { let (k, n) = SHAPES[i % 4]; (0..k * n).map(|j| ((j * 7 + i) % 128) as f32 / 128.0).collect() }).collect();
    let a: Vec<f32> = (0..4864).map(|j| (j % 64) as f32).collect();
    for _ in 0..2 {
    run("f32 TC3", &ws, 4, &|_, w, k, n| gemv32::<3, 0>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    run("f32 TC3 pf1", &ws, 4, &|_, w, k, n| gemv32::<3, 3>(&a[..k], w, k, n, &mut c.lock().unwrap()[..n]));
    }
}
