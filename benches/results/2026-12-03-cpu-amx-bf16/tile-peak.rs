use std::arch::asm;
#[repr(C, align(64))]
struct Cfg([u8; 64]);
fn main() {
    let r: i64; unsafe { asm!("syscall", inlateout("rax") 158i64 => r, in("rdi") 0x1023i64, in("rsi") 18i64, lateout("rcx") _, lateout("r11") _); }
    println!("perm {r}");
    let mut cfg = Cfg([0; 64]);
    cfg.0[0] = 1;
    for t in 0..6 { cfg.0[16 + 2 * t] = 64; cfg.0[48 + t] = 16; }
    // A: 16 x 32 bf16 of 1.0, B 16 x 32 bf16 of 2.0 => C = 32*2 = 64
    let a = [0x3f80u16; 16 * 32];
    let b = [0x4000u16; 16 * 32];
    let mut c = [0f32; 256];
    unsafe {
        asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr());
        asm!("tilezero tmm0");
        asm!("tileloadd tmm1, [{0} + {1}]", in(reg) a.as_ptr(), in(reg) 64usize);
        asm!("tileloadd tmm2, [{0} + {1}]", in(reg) b.as_ptr(), in(reg) 64usize);
        asm!("tdpbf16ps tmm0, tmm1, tmm2");
        asm!("tilestored [{0} + {1}], tmm0", in(reg) c.as_mut_ptr(), in(reg) 64usize);
        let n = 20_000_000u64;
        let t0 = std::time::Instant::now();
        for _ in 0..n { asm!("tdpbf16ps tmm0, tmm1, tmm2", "tdpbf16ps tmm3, tmm1, tmm2", "tdpbf16ps tmm4, tmm1, tmm2", "tdpbf16ps tmm5, tmm1, tmm2"); }
        let s = t0.elapsed().as_secs_f64();
        println!("peak one core {:.0} GFLOP/s", (n * 4 * 16384) as f64 / s / 1e9);
        asm!("tilerelease");
    }
    println!("{:?}", &c[..4]);
}
#[allow(dead_code)]
fn peak() {}
