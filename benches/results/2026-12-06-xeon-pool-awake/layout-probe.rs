use std::arch::x86_64::*;
use std::time::Instant;

const TC: usize = 4;

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn rowmajor(w: *const u16, x: *const u16, k: usize, rows: std::ops::Range<usize>, out: *mut f32, dist: usize) {
    let mut j = rows.start;
    while j < rows.end {
        let mut acc = [_mm512_setzero_ps(); TC];
        let wr: [*const u16; TC] = std::array::from_fn(|t| w.add((j + t) * k));
        let mut p = 0;
        while p < k {
            for t in 0..TC { _mm_prefetch::<_MM_HINT_T1>(wr[t].wrapping_add(dist * TC * k + p).cast()); }
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.add(p).cast()));
            for t in 0..TC {
                let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(wr[t].add(p).cast()));
                acc[t] = _mm512_dpbf16_ps(acc[t], xv, wv);
            }
            p += 32;
        }
        for t in 0..TC { *out.add(j + t) = _mm512_reduce_add_ps(acc[t]); }
        j += TC;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn row1(w: *const u16, x: *const u16, k: usize, rows: std::ops::Range<usize>, out: *mut f32, dist: usize) {
    for j in rows {
        let mut acc = [_mm512_setzero_ps(); 2];
        let wr = w.add(j * k);
        let mut p = 0;
        while p < k {
            _mm_prefetch::<_MM_HINT_T1>((wr.add(p) as *const u8).wrapping_add(dist).cast());
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.add(p).cast()));
            let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(wr.add(p).cast()));
            acc[(p / 32) & 1] = _mm512_dpbf16_ps(acc[(p / 32) & 1], xv, wv);
            p += 32;
        }
        *out.add(j) = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn row4u(w: *const u16, x: *const u16, k: usize, rows: std::ops::Range<usize>, out: *mut f32, dist: usize) {
    for j in rows {
        let mut acc = [_mm512_setzero_ps(); 4];
        let wr = w.add(j * k);
        let mut p = 0;
        while p < k {
            let pf = (wr.add(p) as *const u8).wrapping_add(dist);
            for t in 0..4 { _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64 * t).cast()); }
            for t in 0..4 {
                let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.add(p + 32 * t).cast()));
                let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(wr.add(p + 32 * t).cast()));
                acc[t] = _mm512_dpbf16_ps(acc[t], xv, wv);
            }
            p += 128;
        }
        *out.add(j) = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn row4x1(w: *const u16, x: *const u16, k: usize, rows: std::ops::Range<usize>, out: *mut f32, dist: usize) {
    for j in rows {
        let mut acc = [_mm512_setzero_ps(); 4];
        let wr = w.add(j * k);
        let mut p = 0;
        while p < k {
            let pf = (wr.add(p) as *const u8).wrapping_add(dist);
            for t in 0..4 { _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64 * t).cast()); }
            for t in 0..4 {
                let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.add(p).cast()));
                let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(wr.add(p + 32 * t).cast()));
                acc[t] = _mm512_dpbf16_ps(acc[t], xv, wv);
            }
            p += 128;
        }
        *out.add(j) = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn rowmajor32(w: *const u16, x: *const u16, k16: usize, rows: std::ops::Range<usize>, out: *mut f32, dist: usize) {
    let (w, x, k) = (w as *const f32, x as *const f32, k16 / 2);
    let mut j = rows.start;
    while j < rows.end {
        let mut acc = [_mm512_setzero_ps(); TC];
        let wr: [*const f32; TC] = std::array::from_fn(|t| w.add((j + t) * k));
        let mut p = 0;
        while p < k {
            for t in 0..TC { _mm_prefetch::<_MM_HINT_T1>(wr[t].wrapping_add(dist * TC * k + p).cast()); }
            let xv = _mm512_loadu_ps(x.add(p));
            for t in 0..TC { acc[t] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wr[t].add(p)), acc[t]); }
            p += 16;
        }
        for t in 0..TC { *out.add(j + t) = _mm512_reduce_add_ps(acc[t]); }
        j += TC;
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn inter32(w: *const u16, x: *const u16, k16: usize, rows: std::ops::Range<usize>, out: *mut f32, dist_bytes: usize) {
    let (w, x, k) = (w as *const f32, x as *const f32, k16 / 2);
    let mut j = rows.start;
    while j < rows.end {
        let mut acc = [_mm512_setzero_ps(); TC];
        let base = w.add(j * k);
        let (mut p, mut off) = (0, 0);
        while p < k {
            let pf = (base.add(off) as *const u8).wrapping_add(dist_bytes);
            for t in 0..TC { _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64 * t).cast()); }
            let xv = _mm512_loadu_ps(x.add(p));
            for t in 0..TC { acc[t] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(base.add(off + 16 * t)), acc[t]); }
            p += 16;
            off += 16 * TC;
        }
        for t in 0..TC { *out.add(j + t) = _mm512_reduce_add_ps(acc[t]); }
        j += TC;
    }
}

// Interleaved: block of TC rows stored as [k/32][TC][32].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn interleaved(w: *const u16, x: *const u16, k: usize, rows: std::ops::Range<usize>, out: *mut f32, dist_bytes: usize) {
    let mut j = rows.start;
    while j < rows.end {
        let mut acc = [_mm512_setzero_ps(); TC];
        let base = w.add(j * k);
        let mut p = 0;
        let mut off = 0;
        while p < k {
            let pf = (base.add(off) as *const u8).wrapping_add(dist_bytes);
            for t in 0..TC { _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64 * t).cast()); }
            let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.add(p).cast()));
            for t in 0..TC {
                let wv: __m512bh = std::mem::transmute(_mm512_loadu_si512(base.add(off + 32 * t).cast()));
                acc[t] = _mm512_dpbf16_ps(acc[t], xv, wv);
            }
            p += 32;
            off += 32 * TC;
        }
        for t in 0..TC { *out.add(j + t) = _mm512_reduce_add_ps(acc[t]); }
        j += TC;
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn stream(w: *const u16, n: usize) -> f32 {
    let mut a = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 128 <= n {
        _mm_prefetch::<_MM_HINT_T1>((w.add(i) as *const u8).wrapping_add(8192).cast());
        _mm_prefetch::<_MM_HINT_T1>((w.add(i) as *const u8).wrapping_add(8192+64).cast());
        _mm_prefetch::<_MM_HINT_T1>((w.add(i) as *const u8).wrapping_add(8192+128).cast());
        _mm_prefetch::<_MM_HINT_T1>((w.add(i) as *const u8).wrapping_add(8192+192).cast());
        for t in 0..4 { a[t] = _mm512_add_ps(a[t], _mm512_castsi512_ps(_mm512_loadu_si512(w.add(i + 32 * t).cast()))); }
        i += 128;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])))
}

struct P(*const u16); unsafe impl Send for P {} unsafe impl Sync for P {}
struct O(*mut f32); unsafe impl Send for O {} unsafe impl Sync for O {}

fn main() {
    let shapes: Vec<(usize, usize)> = std::env::args().nth(1).map(|s| s.split(',').map(|p| { let mut it = p.split('x'); (it.next().unwrap().parse().unwrap(), it.next().unwrap().parse().unwrap()) }).collect()).unwrap_or(vec![(9728, 896), (896, 4864), (1152, 896), (896, 896)]);
    let layers = 24;
    // all matrices per layer, one buffer each
    let mats: Vec<(usize, usize, Vec<u16>)> = (0..layers).flat_map(|_| shapes.iter().map(|&(n, k)| (n, k, (0..n * k).map(|i| (0x3f80 + (i % 7) as u16)).collect()))).collect();
    let total: usize = mats.iter().map(|m| m.2.len() * 2).sum();
    // interleaved copies
    let inter: Vec<Vec<u16>> = mats.iter().map(|(n, k, w)| {
        let mut o = vec![0u16; n * k];
        for j0 in (0..*n).step_by(TC) { for p in (0..*k).step_by(32) { for t in 0..TC { for e in 0..32 { o[j0 * k + p * TC + t * 32 + e] = w[(j0 + t) * k + p + e]; } } } }
        o }).collect();
    let x: Vec<u16> = vec![0x3f80; 8192];
    let mut out = vec![0f32; 16384];
    let threads = 2;
    use std::sync::atomic::{AtomicUsize, Ordering::*};
    let run = |variant: usize, dist: usize, out: &mut [f32]| -> f64 {
        let counters: Vec<AtomicUsize> = mats.iter().map(|_| AtomicUsize::new(0)).collect();
        let arrived = AtomicUsize::new(0);
        let op = O(out.as_mut_ptr()); let xp = P(x.as_ptr());
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads { s.spawn(|| { let (xp, op) = (&xp, &op);
                for (mi, (n, k, w)) in mats.iter().enumerate() {
                    let (n, k) = (*n, *k);
                    let wp = if variant != 1 && variant != 6 { w.as_ptr() } else { inter[mi].as_ptr() };
                    let tasks = 16usize; let per = (n / tasks / TC).max(1) * TC;
                    loop { let t = counters[mi].fetch_add(1, Relaxed); let j0 = t * per; if j0 >= n { break; } let j1 = (j0 + per).min(n); unsafe { if variant == 0 { rowmajor(wp, xp.0, k, j0..j1, op.0, dist) } else if variant == 2 { row1(wp, xp.0, k, j0..j1, op.0, dist) } else if variant == 3 { row4u(wp, xp.0, k, j0..j1, op.0, dist) } else if variant == 4 { row4x1(wp, xp.0, k, j0..j1, op.0, dist) } else if variant == 5 { rowmajor32(wp, xp.0, k, j0..j1, op.0, dist) } else if variant == 6 { inter32(wp, xp.0, k, j0..j1, op.0, dist) } else { interleaved(wp, xp.0, k, j0..j1, op.0, dist) } } }
                    arrived.fetch_add(1, AcqRel);
                    while arrived.load(Acquire) < (mi + 1) * threads { std::hint::spin_loop(); }
                }
            }); }
        });
        total as f64 / t0.elapsed().as_secs_f64() / 1e9
    };
    let runstream = || -> f64 {
        let arrived = AtomicUsize::new(0);
        let t0 = Instant::now();
        std::thread::scope(|s| { for h in 0..2 { let arrived = &arrived; let mats = &mats; s.spawn(move || {
            for (mi, (n, k, w)) in mats.iter().enumerate() { let len = n * k; let half = len / 2 / 128 * 128;
                unsafe { std::hint::black_box(stream(w.as_ptr().add(h * half), if h == 0 { half } else { len - half })) };
                arrived.fetch_add(1, AcqRel);
                while arrived.load(Acquire) < (mi + 1) * 2 { std::hint::spin_loop(); }
            } }); } });
        total as f64 / t0.elapsed().as_secs_f64() / 1e9
    };
    println!("total {} MB", total / 1_000_000);
    let which: Vec<String> = std::env::args().skip(2).collect();
    for round in 0..12 {
        let mut line = format!("round {round}:");
        for i in 0..which.len() { let v = &which[(i + round) % which.len()];
            let r = match v.as_str() { "stream" => runstream(), "rowmajor" => run(0, 4, &mut out), "row1" => run(2, 4096, &mut out), "inter" => run(1, 4096, &mut out), "row4u" => run(3, 4096, &mut out), "inter8" => run(1, 8192, &mut out), "row4u8" => run(3, 8192, &mut out), "row4x1" => run(4, 4096, &mut out), "rowmajor32" => run(5, 4, &mut out), "inter32" => run(6, 4096, &mut out), _ => panic!() };
            line += &format!(" {v} {r:.1}");
        }
        println!("{line}");
    }
}
