//! The optional CBLAS path of the CPU's f32 GEMMs (`src/ops/gemm/blas/`): loading what `--cpu-gemm` asks for, and
//! `sgemm_nt` against an f64 reference and across thread counts. The numeric tests need OpenBLAS on the machine
//! (`libopenblas.so.0`, e.g. Debian's `libopenblas0`) and say so when it is absent.

use candle_core::{Device, Tensor};
use mobile_r1_eval::ops::gemm::blas::Blas;
use mobile_r1_eval::ops::{CpuGemm, GemmCalibration};

fn openblas() -> Option<Blas> {
    let b = Blas::load(&CpuGemm::Auto).expect("auto never fails");
    if b.is_none() {
        eprintln!("skipped: no OpenBLAS on this machine");
    }
    b
}

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn reference(a: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|l| a[i * k + l] as f64 * w[j * k + l] as f64)
                .sum();
        }
    }
    c
}

#[test]
fn off_auto_on_and_bad_paths() {
    assert!(Blas::load(&CpuGemm::Builtin).unwrap().is_none());
    let auto = Blas::load(&CpuGemm::Auto).unwrap();
    // `on` is `auto` that insists.
    match Blas::load(&CpuGemm::Blas) {
        Ok(b) => assert_eq!(b.unwrap().description, auto.unwrap().description),
        Err(e) => {
            assert!(auto.is_none());
            assert!(
                e.to_string().starts_with(
                    "CPU GEMM library `on`: no OpenBLAS found (tried libopenblas.so.0"
                ),
                "{e}"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let not_a_library = dir.path().join("libcblas.so");
    std::fs::write(&not_a_library, b"not an ELF file").unwrap();
    for path in [not_a_library.to_str().unwrap(), "/nonexistent/libcblas.so"] {
        let err = Blas::load(&CpuGemm::Library(path.into()))
            .err()
            .expect("must fail")
            .to_string();
        assert!(
            err.starts_with(&format!("CPU GEMM library `{path}`: cannot load {path}")),
            "{err}"
        );
    }
}

#[test]
fn sgemm_nt_matches_an_f64_reference_on_ragged_shapes() {
    let Some(blas) = openblas() else { return };
    assert!(
        blas.description.contains("libopenblas"),
        "{}",
        blas.description
    );
    for (m, k, n) in [
        (1, 1, 1),
        (3, 5, 17),
        (7, 64, 33),
        (64, 96, 300),
        (2, 300, 1),
    ] {
        let (a, w) = (values(m * k, 1), values(n * k, 2));
        let c = blas.sgemm_nt(&a, &w, m, k, n);
        let r = reference(&a, &w, m, k, n);
        assert_eq!(c.len(), m * n);
        for (i, (x, y)) in c.iter().zip(&r).enumerate() {
            assert!(
                (*x as f64 - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "({m},{k},{n})[{i}]: {x} vs {y}"
            );
        }
    }
    assert!(blas.sgemm_nt(&[], &[], 0, 4, 0).is_empty());
    assert_eq!(blas.sgemm_nt(&[], &[], 2, 0, 3), vec![0.0; 6]);
}

/// The columns are split per rayon thread. OpenBLAS's sums depend on the shape of each call, so the last bits may
/// change with the thread count (as with the batch's size), but a given thread count repeats itself exactly.
#[test]
fn sgemm_nt_repeats_exactly_and_agrees_across_thread_counts() {
    let Some(blas) = openblas() else { return };
    let (m, k, n) = (37, 200, 1000);
    let (a, w) = (values(m * k, 3), values(n * k, 4));
    let with = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| blas.sgemm_nt(&a, &w, m, k, n))
    };
    let r = reference(&a, &w, m, k, n);
    for threads in [1, 2, 3, 7] {
        let c = with(threads);
        assert!(c == with(threads), "{threads} threads: not repeatable");
        for (x, y) in c.iter().zip(&r) {
            assert!(
                (*x as f64 - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{threads} threads: {x} vs {y}"
            );
        }
    }
}

/// The tensor entry point: rank-3 input, agreement with candle's matmul, and rows that get the same bits alone
/// and in a batch: independent rows and rows in segments. With OpenBLAS (`auto`, where installed) and with the
/// `gemm` crate alone (`off`).
#[test]
fn matmul_nt_on_tensors_agrees_with_candle_and_is_batch_invariant() {
    use mobile_r1_eval::ops::{Ops, OpsConfig, Rows};
    for cpu_gemm in [CpuGemm::Auto, CpuGemm::Builtin, CpuGemm::GemmCrate] {
        let config = OpsConfig {
            cpu_gemm,
            ..OpsConfig::default()
        };
        matmul_nt_cases(&Ops::new(&config, &Device::Cpu, candle_core::DType::F32).unwrap());
    }

    fn matmul_nt_cases(ops: &Ops) {
        let matmul_nt = |x: &Tensor, w: &Tensor, rows: Rows<'_>| ops.matmul_nt(x, w, rows);
        let x = Tensor::from_vec(values(2 * 5 * 48, 5), (2, 5, 48), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(24 * 48, 6), (24, 48), &Device::Cpu).unwrap();
        let want = x.broadcast_matmul(&w.t().unwrap()).unwrap();
        let check = |got: Tensor| {
            assert_eq!(got.dims(), &[2, 5, 24]);
            let d = (got - &want).unwrap().abs().unwrap().max_all().unwrap();
            assert!(d.to_scalar::<f32>().unwrap() < 1e-5, "{ops:?}");
        };
        check(matmul_nt(&x, &w, Rows::Independent).unwrap());
        let bits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        // Independent rows: row i alone, or at another place in a batch of another size, has the same bits (on
        // this small shape candle's own product sums a row differently for 1, 3 and 12 rows).
        let (xs, ws) = (
            Tensor::from_vec(values(12 * 16, 7), (12, 16), &Device::Cpu).unwrap(),
            Tensor::from_vec(values(96 * 16, 8), (96, 16), &Device::Cpu).unwrap(),
        );
        let all = bits(matmul_nt(&xs, &ws, Rows::Independent).unwrap());
        for (i, start, count) in [(0, 0, 1), (3, 2, 3), (9, 5, 5), (7, 7, 1), (11, 0, 12)] {
            let part = xs.narrow(0, start, count).unwrap();
            let part = bits(matmul_nt(&part, &ws, Rows::Independent).unwrap());
            let row = &part[(i - start) * 96..(i - start + 1) * 96];
            assert_eq!(
                row,
                &all[i * 96..(i + 1) * 96],
                "row {i} among rows {start}..+{count} ({ops:?})"
            );
        }
        let flat = x.flatten_to(1).unwrap();
        // Segments: each segment's rows have the bits of the segment multiplied alone.
        let lens = [4, 1, 0, 5];
        check(matmul_nt(&x, &w, Rows::Segments(&lens)).unwrap());
        let segmented = bits(matmul_nt(&flat, &w, Rows::Segments(&lens)).unwrap());
        for (start, len) in [(0, 4), (4, 1), (5, 5)] {
            let part = flat.narrow(0, start, len).unwrap();
            let alone = bits(matmul_nt(&part, &w, Rows::Segments(&[len])).unwrap());
            assert_eq!(&segmented[start * 24..(start + len) * 24], alone.as_slice());
        }
        // Segments that do not cover the rows, and a wrong input size, are clear errors.
        let err = matmul_nt(&flat, &w, Rows::Segments(&[4, 5])).unwrap_err();
        assert!(
            err.to_string().contains("do not add up to 10 rows"),
            "{err}"
        );
        let bad = Tensor::zeros((3, 47), candle_core::DType::F32, &Device::Cpu).unwrap();
        for rows in [Rows::Independent, Rows::Segments(&[2, 1])] {
            let err = matmul_nt(&bad, &w, rows).unwrap_err();
            assert!(err.to_string().contains("input size 48"), "{err}");
        }
    }
}

/// A CBLAS library given by path: a naive `cblas_sgemm` built here with the C compiler loads and serves products;
/// one that computes wrong results (as an ILP64 build called with 32-bit integers would) is refused at load.
#[test]
fn a_library_by_path_is_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let build = |name: &str, body: &str| -> Option<String> {
        let src = dir.path().join(format!("{name}.c"));
        let lib = dir.path().join(format!("lib{name}.so"));
        let code = format!(
            "void cblas_sgemm(int layout, int ta, int tb, int m, int n, int k, float alpha, const float *a,\n\
             int lda, const float *b, int ldb, float beta, float *c, int ldc) {{\n\
             for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) {{\n\
             float s = 0; for (int l = 0; l < k; l++) s += a[i * lda + l] * b[j * ldb + l];\n\
             {body} }} }}\n"
        );
        std::fs::write(&src, code).unwrap();
        let ok = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| lib.to_str().unwrap().to_string())
    };
    let Some(good) = build("naive", "c[i * ldc + j] = alpha * s;") else {
        eprintln!("skipped: no C compiler");
        return;
    };
    let blas = Blas::load(&CpuGemm::Library(good.clone().into()))
        .unwrap()
        .unwrap();
    assert_eq!(
        blas.description, good,
        "no OpenBLAS config string: the path"
    );
    let (a, w) = (values(6 * 9, 7), values(5 * 9, 8));
    let r = reference(&a, &w, 6, 9, 5);
    for (x, y) in blas.sgemm_nt(&a, &w, 6, 9, 5).iter().zip(&r) {
        assert!((*x as f64 - y).abs() < 1e-5);
    }
    let bad = build("wrong", "c[i * ldc + j] = alpha * s + 1.0f;").unwrap();
    let err = Blas::load(&CpuGemm::Library(bad.into()))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("cblas_sgemm gave wrong results"), "{err}");
}

#[test]
fn sizes_beyond_the_lp64_interface_stay_off_cblas() {
    use mobile_r1_eval::ops::gemm::blas::fits_cblas;
    assert!(fits_cblas(i32::MAX as usize, 1, 1));
    assert!(!fits_cblas(1 << 31, 1, 1));
    assert!(!fits_cblas(1, 1 << 31, 1));
    assert!(!fits_cblas(1, 1, 1 << 31));
}

/// `choose`: `off` records why; `auto` uses an installed OpenBLAS only where its kernels fit the CPU and it is at
/// least as fast as the built-in GEMM on the calibration product, with both rates recorded; the calibration kept
/// in a file is measured once and read back.
#[test]
fn choose_uses_a_library_only_where_it_fits_and_is_not_slower() {
    use mobile_r1_eval::ops::gemm::blas::{
        choose, core_misfit, Calibration, CpuSimd, LibraryRates,
    };
    use mobile_r1_eval::ops::gemm::packed::BuiltinGemm;
    let builtin = BuiltinGemm::for_this_cpu(false);
    let (none, off) = choose(&CpuGemm::Builtin, &GemmCalibration::EachStart, builtin).unwrap();
    assert!(none.is_none() && !off.used && off.library.is_none());
    assert!(off.reason.contains("off"), "{}", off.reason);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu-gemm.json");
    let kept_in = GemmCalibration::File(file.clone());
    let (lib, auto) = choose(&CpuGemm::Auto, &kept_in, builtin).unwrap();
    eprintln!("auto: {auto:?}");
    let Some(found) = auto.library.as_deref() else {
        assert!(lib.is_none() && !auto.used);
        eprintln!("skipped: no OpenBLAS on this machine");
        return;
    };
    assert!(found.contains("libopenblas"), "{found}");
    let (b, g) = (auto.blas_gflops.unwrap(), auto.builtin_gflops.unwrap());
    assert!(b > 0.0 && g > 0.0);
    let misfit = auto
        .corename
        .as_deref()
        .and_then(|c| core_misfit(c, CpuSimd::detect()));
    assert_eq!(auto.used, misfit.is_none() && b >= g, "{auto:?}");
    assert!(lib.is_some(), "the library found is loaded, used or not");
    let kept: Calibration = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!((kept.rates.blas_gflops, kept.rates.builtin_gflops), (b, g));
    // A later start reads the kept rates and decides the same.
    let (_, again) = choose(&CpuGemm::Auto, &kept_in, builtin).unwrap();
    assert_eq!(
        (again.used, again.blas_gflops),
        (auto.used, auto.blas_gflops)
    );
    assert!(again.calibration.unwrap().contains("measured once"));
    // A library that measured slower on this machine is not used; one that measured at least as fast is.
    if misfit.is_none() {
        for (rates, used) in [((50.0, 60.0), false), ((60.0, 60.0), true)] {
            let kept = Calibration {
                rates: LibraryRates {
                    blas_gflops: rates.0,
                    builtin_gflops: rates.1,
                },
                ..kept.clone()
            };
            std::fs::write(&file, serde_json::to_string(&kept).unwrap()).unwrap();
            let (lib, c) = choose(&CpuGemm::Auto, &kept_in, builtin).unwrap();
            assert_eq!((lib.is_some(), c.used), (true, used), "{c:?}");
            assert_eq!(
                c.reason.contains("slower than the built-in"),
                !used,
                "{c:?}"
            );
        }
    }
    // Asked for by name, the library is used whatever it measures.
    let (lib, on) = choose(&CpuGemm::Blas, &GemmCalibration::EachStart, builtin).unwrap();
    assert!(
        lib.is_some() && on.used && on.reason.contains("asked for"),
        "{on:?}"
    );
}

/// The CPU ops with the built-in GEMM (`off`) and with the `gemm` crate for all (`gemm-crate`).
fn builtin_and_gemm_crate() -> (mobile_r1_eval::ops::Ops, mobile_r1_eval::ops::Ops) {
    use mobile_r1_eval::ops::{Ops, OpsConfig};
    let ops = |cpu_gemm| {
        let config = OpsConfig {
            cpu_gemm,
            ..OpsConfig::default()
        };
        Ops::new(&config, &Device::Cpu, candle_core::DType::F32).unwrap()
    };
    (ops(CpuGemm::Builtin), ops(CpuGemm::GemmCrate))
}

/// The built-in GEMM (`off`) on a CPU with AVX2 and no AVX-512: segments of `packed::MIN_ROWS` rows or more
/// go through the packed kernel, shorter ones through the `gemm` crate, each segment with the bits it has alone;
/// `gemm-crate` keeps the `gemm` crate for all. Elsewhere the built-in GEMM is the `gemm` crate for all.
#[test]
fn the_built_in_gemm_takes_the_packed_kernel_for_large_segments() {
    use mobile_r1_eval::ops::gemm::packed::{self, BuiltinGemm, MIN_ROWS};
    use mobile_r1_eval::ops::Rows;
    let (builtin, crate_only) = builtin_and_gemm_crate();
    let packed = BuiltinGemm::for_this_cpu(false) == BuiltinGemm::Packed;
    eprintln!(
        "the built-in GEMM here: {}",
        builtin.manifest().cpu_f32_gemm
    );
    assert_eq!(builtin.manifest().cpu_f32_gemm.contains("packed"), packed);
    assert_eq!(builtin.manifest().cpu_gemm_packed_min_rows, MIN_ROWS);
    assert_eq!(crate_only.manifest().cpu_f32_gemm, "gemm crate (candle)");
    let (k, n, lens) = (40, 24, [MIN_ROWS, 5, MIN_ROWS + 3]);
    let rows: usize = lens.iter().sum();
    let xv = values(rows * k, 9);
    let wv = values(n * k, 10);
    let x = Tensor::from_vec(xv.clone(), (rows, k), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(wv.clone(), (n, k), &Device::Cpu).unwrap();
    let bits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let got = bits(builtin.matmul_nt(&x, &w, Rows::Segments(&lens)).unwrap());
    let want = reference(&xv, &wv, rows, k, n);
    for (g, r) in got.iter().zip(&want) {
        assert!(
            (*g as f64 - r).abs() <= 1e-5 * (1.0 + r.abs()),
            "{g} vs {r}"
        );
    }
    let mut start = 0;
    for len in lens {
        let part = x.narrow(0, start, len).unwrap();
        let seg = &got[start * n..(start + len) * n];
        let alone = bits(
            builtin
                .matmul_nt(&part, &w, Rows::Segments(&[len]))
                .unwrap(),
        );
        assert_eq!(seg, alone.as_slice(), "segment of {len} rows");
        let by_crate = bits(
            crate_only
                .matmul_nt(&part, &w, Rows::Segments(&[len]))
                .unwrap(),
        );
        if packed && len >= MIN_ROWS {
            let mut c = vec![0f32; len * n];
            packed::sgemm_nt(&xv[start * k..(start + len) * k], &wv, (len, k, n), &mut c);
            assert_eq!(seg, c.as_slice(), "{len} rows: the packed kernel's bits");
        } else {
            assert_eq!(
                seg,
                by_crate.as_slice(),
                "{len} rows: the gemm crate's bits"
            );
        }
        start += len;
    }
}

/// Independent rows (decode, last positions) under the built-in GEMM: on a CPU with AVX2 and FMA (with or without
/// AVX-512), one dot product per output (`gemm::row`), a row's bits the same alone or with others; `gemm-crate`,
/// and CPUs without AVX2, keep the `gemm` crate in products of `ROW_BLOCK` rows.
#[test]
fn independent_rows_take_the_row_kernel_wherever_the_cpu_runs_it() {
    use mobile_r1_eval::ops::gemm::row::{self, RowGemm};
    use mobile_r1_eval::ops::{Ops, Rows};
    let (builtin, crate_only) = builtin_and_gemm_crate();
    let packed = RowGemm::for_this_cpu(false) != RowGemm::GemmCrate;
    let rows_manifest = builtin.manifest().cpu_gemm_independent_rows;
    eprintln!("independent rows here: {rows_manifest}");
    assert_eq!(rows_manifest.contains("dot product"), packed);
    assert!(crate_only
        .manifest()
        .cpu_gemm_independent_rows
        .contains("gemm crate"));
    let (m, k, n) = (5, 37, 29);
    let (xv, wv) = (values(m * k, 11), values(n * k, 12));
    let x = Tensor::from_vec(xv.clone(), (m, k), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(wv.clone(), (n, k), &Device::Cpu).unwrap();
    let bits = |o: &Ops, t: &Tensor| {
        let y = o.matmul_nt(t, &w, Rows::Independent).unwrap();
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    let got = bits(&builtin, &x);
    for (g, r) in got.iter().zip(reference(&xv, &wv, m, k, n)) {
        assert!(
            (*g as f64 - r).abs() <= 1e-5 * (1.0 + r.abs()),
            "{g} vs {r}"
        );
    }
    assert_eq!(
        bits(&builtin, &x.narrow(0, 3, 1).unwrap()),
        got[3 * n..4 * n]
    );
    let by_crate = bits(&crate_only, &x);
    if packed {
        let mut c = vec![0f32; m * n];
        row::sgemm_nt_rows(&xv, &wv, (m, k, n), &mut c);
        assert_eq!(got, c, "the row kernel's bits");
    } else {
        assert_eq!(got, by_crate, "the gemm crate's bits");
    }
}
