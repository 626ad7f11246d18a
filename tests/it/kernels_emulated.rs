//! The CUDA kernels of `kernels/fused.cu` run on the CPU: their own source, built with a C++ compiler against
//! `kernels/emu/cuda_emu.h` (threads, barriers, warp shuffles and `mma.sync` emulated), launched with the real
//! launch geometry and metadata (`ops::cuda::launch`) through every case of `self-test` (`ops::selftest`), and
//! compared with the CPU references. This is the kernels' test on machines without a GPU; `self-test --device cuda`
//! remains the test of the hardware. Skipped (with a message) where no C++ compiler is found.

use std::ffi::{c_char, c_void, CString};
use std::sync::OnceLock;

use candle_core::{DType, Device, Result, Tensor};
use half::{bf16, f16};
use mobile_r1_eval::ops::cuda::launch::{self, Geometry, SegmentMeta};
use mobile_r1_eval::ops::selftest::{self as check, DecodeOut, Executor, Ran};
use mobile_r1_eval::ops::{DecodeKv, QkvRope, Varlen};

type LaunchFn =
    unsafe extern "C" fn(*const c_char, *const u32, *const u32, *mut *mut c_void) -> i32;

/// The emulated kernels: `kernels/emu/emu.cpp` built into a shared library.
struct Emu {
    launch: LaunchFn,
    /// The kernels its registry can launch.
    registered: Vec<String>,
    lib_path: std::path::PathBuf,
    _lib: libloading::Library,
    _dir: tempfile::TempDir,
}

fn emu() -> Option<&'static Emu> {
    static EMU: OnceLock<Option<Emu>> = OnceLock::new();
    EMU.get_or_init(build).as_ref()
}

fn build() -> Option<Emu> {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libfused_emu.so");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let out = std::process::Command::new(&cxx)
        .args([
            "-std=c++20",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-fno-strict-aliasing",
            "-Wall",
            "-Wno-unknown-pragmas",
            "-Wno-sign-compare",
        ])
        .arg(format!("-I{root}/kernels/emu/include"))
        .arg(format!("{root}/kernels/emu/emu.cpp"))
        .arg("-o")
        .arg(&lib)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: no C++ compiler ({cxx}: {e})");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kernels/fused.cu does not build for the CPU emulation:\n{stderr}"
    );
    // Warnings fail the build where the project's CI compiles it (Linux, GCC); other compilers only show them.
    if cfg!(target_os = "linux") {
        assert!(stderr.trim().is_empty(), "compiler warnings:\n{stderr}");
    } else if !stderr.trim().is_empty() {
        eprintln!("compiler warnings:\n{stderr}");
    }
    // SAFETY: the library was just built from the project's sources; its initialisers are static tables.
    let lib_handle = unsafe { libloading::Library::new(&lib) }.unwrap();
    // SAFETY: `mre_emu_launch` has this C signature in kernels/emu/emu.cpp.
    let launch = unsafe { *lib_handle.get::<LaunchFn>(b"mre_emu_launch\0").unwrap() };
    // SAFETY: `mre_emu_kernels` returns a static NUL-terminated string (kernels/emu/emu.cpp).
    let registered = unsafe {
        let names = *lib_handle
            .get::<unsafe extern "C" fn() -> *const c_char>(b"mre_emu_kernels\0")
            .unwrap();
        std::ffi::CStr::from_ptr(names())
            .to_string_lossy()
            .into_owned()
    };
    Some(Emu {
        launch,
        registered: registered.lines().map(str::to_string).collect(),
        lib_path: lib,
        _lib: lib_handle,
        _dir: dir,
    })
}

/// Bytes kept before and after every buffer, to catch writes out of bounds.
const GUARD: usize = 256;
const GUARD_BYTE: u8 = 0xA5;
/// What an output holds before the kernel runs: all ones, a NaN in f32, bf16 and f16, so an element the kernel
/// never writes fails the comparison.
const UNWRITTEN: u8 = 0xFF;

/// A "device" buffer: 8-byte-aligned host memory with guard bands, handed to the kernels by address. Dropping it
/// checks the guard bands (inputs included).
struct Buf {
    words: Vec<u64>,
    len: usize,
    what: String,
}

impl Buf {
    fn new(payload: &[u8], what: &str) -> Self {
        let mut words = vec![0u64; (payload.len() + 2 * GUARD).div_ceil(8)];
        let bytes = Self::bytes_of(&mut words);
        bytes.fill(GUARD_BYTE);
        bytes[GUARD..GUARD + payload.len()].copy_from_slice(payload);
        Self {
            words,
            len: payload.len(),
            what: what.to_string(),
        }
    }
    fn bytes_of(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s viewed as bytes.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: u64s viewed as bytes.
        unsafe {
            std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.words.len() * 8)
        }
    }
    fn of(t: &Tensor, what: &str) -> Result<Self> {
        Ok(Self::new(&tensor_bytes(t)?, what))
    }
    fn output(len: usize, what: &str) -> Self {
        Self::new(&vec![UNWRITTEN; len], what)
    }
    fn words<T: Copy>(v: &[T], what: &str) -> Self {
        // SAFETY: plain integers viewed as bytes.
        let b = unsafe {
            std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v))
        };
        Self::new(b, what)
    }
    fn addr(&mut self) -> u64 {
        Self::bytes_of(&mut self.words)[GUARD..].as_mut_ptr() as u64
    }
    fn guards_intact(&self) -> bool {
        let b = self.bytes();
        b[..GUARD]
            .iter()
            .chain(&b[GUARD + self.len..])
            .all(|&x| x == GUARD_BYTE)
    }
    /// The payload as a tensor.
    fn tensor(&self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        assert!(
            self.guards_intact(),
            "{}: a kernel wrote outside this buffer",
            self.what
        );
        bytes_tensor(&self.bytes()[GUARD..GUARD + self.len], dtype, shape)
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert!(
                self.guards_intact(),
                "{}: a kernel wrote outside this buffer",
                self.what
            );
        }
    }
}

fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let flat = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F32 => flat
            .to_vec1::<f32>()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::BF16 => flat
            .to_vec1::<bf16>()?
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => flat
            .to_vec1::<f16>()?
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        other => candle_core::bail!("no kernels for {other:?}"),
    })
}

fn bytes_tensor(b: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor> {
    let dev = &Device::Cpu;
    match dtype {
        DType::F32 => {
            let v: Vec<f32> = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            Tensor::from_vec(v, shape, dev)
        }
        DType::BF16 | DType::F16 => {
            let bits = b
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes(c.try_into().unwrap()));
            if dtype == DType::BF16 {
                Tensor::from_vec(bits.map(bf16::from_bits).collect::<Vec<_>>(), shape, dev)
            } else {
                Tensor::from_vec(bits.map(f16::from_bits).collect::<Vec<_>>(), shape, dev)
            }
        }
        other => candle_core::bail!("no kernels for {other:?}"),
    }
}

/// A kernel argument, as `cuLaunchKernel` takes them.
enum Arg {
    Ptr(u64),
    I32(i32),
    F32(f32),
}

impl Emu {
    fn run(&self, name: &str, g: Geometry, args: &[Arg]) {
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(p) => p,
                Arg::I32(x) => x as u32 as u64,
                Arg::F32(x) => x.to_bits() as u64,
            })
            .collect();
        // Little-endian: a slot's address is also the address of its low 4 bytes (the i32 / f32 arguments).
        let mut ptrs: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| s as *mut u64 as *mut c_void)
            .collect();
        let grid = [g.grid.0, g.grid.1, g.grid.2];
        let block = [g.block.0, g.block.1, g.block.2];
        let cname = CString::new(name).unwrap();
        // SAFETY: the arguments are those of kernel `name` in kernels/fused.cu, in order, and every pointer
        // addresses a live buffer sized as the CUDA launcher in src/ops/cuda sizes it.
        let rc = unsafe {
            (self.launch)(
                cname.as_ptr(),
                grid.as_ptr(),
                block.as_ptr(),
                ptrs.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "the emulation has no kernel {name}");
    }
}

/// Every op through the emulated kernels, launched as `src/ops/cuda` launches them.
struct Emulated(&'static Emu);

fn ran<T>(out: T) -> Result<Ran<T>> {
    Ok(Ran { out, kernel: true })
}

impl Executor for Emulated {
    fn has_mma(&self, dtype: DType) -> bool {
        dtype != DType::F32
    }

    fn rms_norm_hf(&self, x: &Tensor, w: &Tensor, eps: f32) -> Result<Ran<Tensor>> {
        let (rows, cols) = x.dims2()?;
        let (mut xb, mut wb) = (Buf::of(x, "x")?, Buf::of(w, "w")?);
        let mut out = Buf::output(xb.len, "out");
        let args = [
            Arg::Ptr(xb.addr()),
            Arg::Ptr(wb.addr()),
            Arg::Ptr(out.addr()),
            Arg::I32(cols as i32),
            Arg::F32(eps),
        ];
        let name = launch::kernel_name("rmsnorm_hf", x.dtype())?;
        self.0.run(&name, launch::rms_norm(rows, cols), &args);
        ran(out.tensor(x.dtype(), x.dims())?)
    }

    fn swiglu_packed(&self, gu: &Tensor, bias: Option<&Tensor>) -> Result<Ran<Tensor>> {
        let (rows, cols2) = gu.dims2()?;
        let cols = cols2 / 2;
        let mut gb = Buf::of(gu, "gu")?;
        let mut bb = bias.map(|b| Buf::of(b, "bias")).transpose()?;
        let bias_addr = match bb.as_mut() {
            Some(b) => b.addr(),
            None => gb.addr(),
        };
        let mut out = Buf::output(gb.len / 2, "out");
        let args = [
            Arg::Ptr(gb.addr()),
            Arg::Ptr(bias_addr),
            Arg::I32(bias.is_some() as i32),
            Arg::Ptr(out.addr()),
            Arg::I32(rows as i32),
            Arg::I32(cols as i32),
        ];
        let name = launch::kernel_name("swiglu_packed", gu.dtype())?;
        self.0.run(&name, launch::rows_cols(rows, cols), &args);
        ran(out.tensor(gu.dtype(), &[rows, cols])?)
    }

    fn bias_add(&self, y: &Tensor, b: &Tensor) -> Result<Ran<Tensor>> {
        self.bias_op("bias_add", &[y, b])
    }

    fn bias_residual(&self, y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Ran<Tensor>> {
        self.bias_op("bias_residual", &[y, b, r])
    }

    fn qkv_rope(&self, a: QkvRope<'_>) -> Result<Ran<(Tensor, Tensor, Tensor)>> {
        let (n, width) = a.y.dims2()?;
        let d = width / (a.heads + 2 * a.kv_heads);
        let dtype = a.y.dtype();
        let mut ins: Vec<Buf> = [(a.y, "y"), (a.bias, "bias"), (a.cos, "cos"), (a.sin, "sin")]
            .into_iter()
            .map(|(t, what)| Buf::of(t, what))
            .collect::<Result<_>>()?;
        let esize = dtype.size_in_bytes();
        let mut q = Buf::output(n * a.heads * d * esize, "q");
        let mut k = Buf::output(n * a.kv_heads * d * esize, "k");
        let mut v = Buf::output(n * a.kv_heads * d * esize, "v");
        let mut args: Vec<Arg> = ins.iter_mut().map(|b| Arg::Ptr(b.addr())).collect();
        args.extend([
            Arg::Ptr(q.addr()),
            Arg::Ptr(k.addr()),
            Arg::Ptr(v.addr()),
            Arg::I32(a.heads as i32),
            Arg::I32(a.kv_heads as i32),
            Arg::I32(d as i32),
        ]);
        let family = if a.cos.dtype() == dtype {
            "qkv_rope"
        } else {
            "qkv_rope_f32rot"
        };
        let name = launch::kernel_name(family, dtype)?;
        self.0.run(&name, launch::qkv_rope(n), &args);
        ran((
            q.tensor(dtype, &[n, a.heads, d])?,
            k.tensor(dtype, &[n, a.kv_heads, d])?,
            v.tensor(dtype, &[n, a.kv_heads, d])?,
        ))
    }

    fn decode_attention(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        kv: &[DecodeKv<'_>],
        scale: f32,
    ) -> Result<Ran<DecodeOut>> {
        let (b, heads, d) = q.dims3()?;
        let kv_heads = k_new.dim(1)?;
        let dtype = q.dtype();
        let mut caches: Vec<(Buf, Buf)> = kv
            .iter()
            .map(|c| Ok((Buf::of(c.k, "k cache")?, Buf::of(c.v, "v cache")?)))
            .collect::<Result<_>>()?;
        let k_ptrs: Vec<u64> = caches.iter_mut().map(|c| c.0.addr()).collect();
        let v_ptrs: Vec<u64> = caches.iter_mut().map(|c| c.1.addr()).collect();
        let caps: Vec<i32> = kv.iter().map(|c| c.k.dim(1).unwrap() as i32).collect();
        let lens: Vec<i32> = kv.iter().map(|c| c.len as i32).collect();
        let mut tables = [
            Buf::words(&k_ptrs, "k_ptrs"),
            Buf::words(&v_ptrs, "v_ptrs"),
            Buf::words(&caps, "caps"),
            Buf::words(&lens, "lens"),
        ];
        let (mut qb, mut kb, mut vb) = (
            Buf::of(q, "q")?,
            Buf::of(k_new, "k_new")?,
            Buf::of(v_new, "v_new")?,
        );
        let mut out = Buf::output(qb.len, "out");
        let mut args = vec![
            Arg::Ptr(qb.addr()),
            Arg::Ptr(kb.addr()),
            Arg::Ptr(vb.addr()),
        ];
        args.extend(tables.iter_mut().map(|t| Arg::Ptr(t.addr())));
        args.extend([
            Arg::Ptr(out.addr()),
            Arg::I32(kv_heads as i32),
            Arg::I32((heads / kv_heads) as i32),
            Arg::F32(scale),
        ]);
        let name = launch::kernel_name(&launch::decode_family(d)?, dtype)?;
        self.0.run(&name, launch::decode(b, kv_heads), &args);
        let written = caches
            .iter()
            .zip(kv)
            .map(|((kc, vc), c)| Ok((kc.tensor(dtype, c.k.dims())?, vc.tensor(dtype, c.v.dims())?)))
            .collect::<Result<_>>()?;
        ran((out.tensor(dtype, q.dims())?, written))
    }

    fn varlen_attention(&self, a: Varlen<'_>, mma: bool) -> Result<Ran<Tensor>> {
        let (n, heads, d) = a.q.dims3()?;
        let kv_heads = a.k.dim(1)?;
        let dtype = a.q.dtype();
        let mut prefixes: Vec<Option<(Buf, Buf)>> = a
            .segs
            .iter()
            .map(|s| {
                s.prefix
                    .map(|(k, v, _)| Ok((Buf::of(k, "prefix k")?, Buf::of(v, "prefix v")?)))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let metas: Vec<SegmentMeta> = a
            .segs
            .iter()
            .map(|s| {
                let (prefix_len, prefix_cap) =
                    s.prefix.map_or((0, 0), |(k, _, p)| (p, k.dim(1).unwrap()));
                SegmentMeta {
                    start: s.start,
                    len: s.len,
                    prefix_len,
                    prefix_cap,
                }
            })
            .collect();
        let (meta, tiles) = launch::varlen_meta(&metas, n, launch::varlen_tile_rows(mma))?;
        let addr = |b: &mut Buf| b.addr();
        let pk: Vec<u64> = prefixes
            .iter_mut()
            .map(|p| p.as_mut().map_or(0, |p| addr(&mut p.0)))
            .collect();
        let pv: Vec<u64> = prefixes
            .iter_mut()
            .map(|p| p.as_mut().map_or(0, |p| addr(&mut p.1)))
            .collect();
        let (mut metab, mut ptrs) = (
            Buf::words(&meta, "meta"),
            Buf::words(&[pk, pv].concat(), "ptrs"),
        );
        let (mut qb, mut kb, mut vb) = (Buf::of(a.q, "q")?, Buf::of(a.k, "k")?, Buf::of(a.v, "v")?);
        let mut out = Buf::output(qb.len, "out");
        let args = [
            Arg::Ptr(qb.addr()),
            Arg::Ptr(kb.addr()),
            Arg::Ptr(vb.addr()),
            Arg::Ptr(metab.addr()),
            Arg::Ptr(ptrs.addr()),
            Arg::Ptr(out.addr()),
            Arg::I32(a.segs.len() as i32),
            Arg::I32(tiles as i32),
            Arg::I32(heads as i32),
            Arg::I32(kv_heads as i32),
            Arg::I32(a.causal as i32),
            Arg::F32(a.scale),
        ];
        let kind = if mma { "mma" } else { "attn" };
        let name = launch::kernel_name(&format!("varlen_{kind}_d{d}"), dtype)?;
        self.0.run(&name, launch::varlen(tiles, heads, mma), &args);
        ran(out.tensor(dtype, a.q.dims())?)
    }
}

impl Emulated {
    /// `bias_add` (y, b) or `bias_residual` (y, b, r): the full operands and biases in the kernel's order.
    fn bias_op(&self, op: &str, operands: &[&Tensor]) -> Result<Ran<Tensor>> {
        let (rows, cols) = operands[0].dims2()?;
        let mut bufs: Vec<Buf> = operands
            .iter()
            .map(|t| Buf::of(t, "operand"))
            .collect::<Result<_>>()?;
        let mut out = Buf::output(bufs[0].len, "out");
        let mut args: Vec<Arg> = bufs.iter_mut().map(|b| Arg::Ptr(b.addr())).collect();
        args.extend([
            Arg::Ptr(out.addr()),
            Arg::I32(rows as i32),
            Arg::I32(cols as i32),
        ]);
        let name = launch::kernel_name(op, operands[0].dtype())?;
        self.0.run(&name, launch::rows_cols(rows, cols), &args);
        ran(out.tensor(operands[0].dtype(), &[rows, cols])?)
    }
}

#[test]
fn every_kernel_matches_its_reference_under_emulation() {
    let Some(emu) = emu() else { return };
    let t0 = std::time::Instant::now();
    let results = check::run_with(&Emulated(emu)).unwrap();
    let mut failed = Vec::new();
    for r in &results {
        println!(
            "{:<60} {:<5} max |diff| {:.3e} (tolerance {:.3e}){}",
            r.case,
            r.dtype,
            r.max_abs_diff,
            r.tolerance,
            if r.passed { "" } else { "  FAILED" }
        );
        if !r.passed {
            failed.push(format!("{} {}", r.case, r.dtype));
        }
    }
    println!(
        "{} cases in {:.1} s",
        results.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert!(results.iter().all(|r| r.kernel));
    // Both varlen kernels ran for the 16-bit types.
    assert_eq!(
        results
            .iter()
            .filter(|r| r.case.starts_with("varlen mma"))
            .count(),
        6
    );
}

#[test]
fn every_kernel_entry_point_is_emulated() {
    let Some(emu) = emu() else { return };
    // The library exports every `extern "C" __global__` function of kernels/fused.cu; the registry must list each.
    let nm = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&emu.lib_path)
        .output();
    let Ok(nm) = nm
        .as_ref()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    else {
        eprintln!("skipped: no `nm` to list the library's symbols");
        return;
    };
    let mut exported: Vec<String> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| !s.starts_with('_') && !s.starts_with("mre_emu_"))
        .map(str::to_string)
        .collect();
    exported.sort();
    assert_eq!(
        exported, emu.registered,
        "add the missing kernels to kernels/emu/emu.cpp"
    );
    assert_eq!(exported.len(), 3 * 12 + 2 * 3);
}
