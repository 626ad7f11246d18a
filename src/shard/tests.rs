use super::*;

fn env(pairs: &[(&str, &str)]) -> SchedulerEnv {
    SchedulerEnv::from_pairs(pairs.iter().copied())
}

fn auto(count: Option<usize>) -> ShardArg {
    ShardArg::Auto { count }
}

#[test]
fn parses_fixed_and_auto() {
    assert_eq!(
        "2/3".parse::<ShardArg>().unwrap(),
        ShardArg::Fixed(ShardSpec { index: 2, count: 3 })
    );
    assert_eq!("auto".parse::<ShardArg>().unwrap(), auto(None));
    assert_eq!("auto/8".parse::<ShardArg>().unwrap(), auto(Some(8)));
    for bad in ["3/3", "1/0", "x/2", "1", "auto/0", "-1/2", "1/two"] {
        let e = bad.parse::<ShardArg>().unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("expected I/N"), "{bad}: {e}");
    }
    assert_eq!(ShardSpec::new(0, 3).unwrap().dir_name(), "0-of-3");
    assert_eq!(auto(Some(4)).to_string(), "auto/4");
}

#[test]
fn slurm_array_with_offset_and_step() {
    let e = env(&[
        ("SLURM_ARRAY_TASK_ID", "12"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
        ("SLURM_ARRAY_TASK_MIN", "10"),
    ]);
    assert_eq!(
        auto(None).resolve(&e).unwrap(),
        ShardSpec { index: 2, count: 3 }
    );
    let stepped = env(&[
        ("SLURM_ARRAY_TASK_ID", "4"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_STEP", "2"),
    ]);
    assert_eq!(
        auto(None).resolve(&stepped).unwrap(),
        ShardSpec { index: 2, count: 3 }
    );
    let err = auto(Some(4)).resolve(&e).unwrap_err().to_string();
    assert!(
        err.contains("auto/4 disagrees") && err.contains("Slurm"),
        "{err}"
    );
}

#[test]
fn torchrun_and_kubernetes() {
    let t = env(&[("RANK", "1"), ("WORLD_SIZE", "4")]);
    assert_eq!(
        auto(None).resolve(&t).unwrap(),
        ShardSpec { index: 1, count: 4 }
    );
    let k = env(&[("JOB_COMPLETION_INDEX", "5")]);
    assert_eq!(
        auto(Some(6)).resolve(&k).unwrap(),
        ShardSpec { index: 5, count: 6 }
    );
    let err = auto(None).resolve(&k).unwrap_err().to_string();
    assert!(err.contains("auto/N"), "{err}");
    let err = auto(Some(5)).resolve(&k).unwrap_err().to_string();
    assert!(err.contains("not below the count 5"), "{err}");
    let err = auto(None)
        .resolve(&env(&[("RANK", "x"), ("WORLD_SIZE", "2")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("RANK=\"x\""), "{err}");
}

#[test]
fn no_scheduler_names_every_variable() {
    let err = auto(None)
        .resolve(&env(&[("WORLD_SIZE", "2")]))
        .unwrap_err()
        .to_string();
    for v in SchedulerEnv::NAMES.iter().filter(|v| !v.ends_with("STEP")) {
        assert!(err.contains(v), "{v} missing: {err}");
    }
    let fixed = ShardArg::Fixed(ShardSpec { index: 0, count: 2 });
    assert_eq!(fixed.resolve(&SchedulerEnv::default()).unwrap().count, 2);
}

/// Deterministic pseudo-random costs (a fixed LCG, no dependency).
fn costs(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            1 + (x >> 33) % 5000
        })
        .collect()
}

#[test]
fn partition_covers_once_and_balances() {
    for (n, count) in [(500, 8), (37, 3), (10, 10), (1, 1), (64, 7)] {
        let c = costs(n, n as u64 * 31 + count as u64);
        let parts = partition(&c, count);
        assert_eq!(parts.len(), count);
        let mut all: Vec<usize> = parts.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>(), "n={n} count={count}");
        let loads: Vec<u64> = parts
            .iter()
            .map(|p| p.iter().map(|&i| c[i]).sum())
            .collect();
        let (lo, hi) = (*loads.iter().min().unwrap(), *loads.iter().max().unwrap());
        assert!(hi - lo <= *c.iter().max().unwrap(), "{loads:?}");
        assert!(parts.iter().all(|p| p.windows(2).all(|w| w[0] < w[1])));
    }
    // Many items: the spread is small against the mean load.
    let c = costs(500, 7);
    let loads: Vec<u64> = partition(&c, 8)
        .iter()
        .map(|p| p.iter().map(|&i| c[i]).sum())
        .collect();
    let mean = c.iter().sum::<u64>() / 8;
    assert!(
        loads.iter().all(|&l| l.abs_diff(mean) * 100 < mean),
        "{loads:?}"
    );
}

#[test]
fn partition_is_deterministic_with_ties() {
    let c = vec![5u64; 7];
    assert_eq!(
        partition(&c, 3),
        vec![vec![0, 3, 6], vec![1, 4], vec![2, 5]]
    );
    let c = costs(200, 3);
    assert_eq!(partition(&c, 5), partition(&c.clone(), 5));
}

#[test]
fn more_shards_than_trajectories() {
    let parts = partition(&[3, 9], 4);
    assert_eq!(parts, vec![vec![1], vec![0], vec![], vec![]]);
    assert!(partition(&[], 3).iter().all(Vec::is_empty));
}

#[test]
fn cost_follows_smart_resize() {
    let image = ImageProcessorConfig::default().with_pixel_bounds(3136, 200_704);
    // A 720×1600 screen under 200,704 px: tokens are the resized 28-px cells.
    let (h, w) = smart_resize(1600, 720, 28, 3136, 200_704).unwrap();
    let tokens = (h / 28) * (w / 28);
    assert_eq!(trajectory_cost(6, 720, 1600, &image), 6 * tokens as u64);
    assert_eq!(trajectory_cost(2, 0, 1600, &image), 2);
    let big = image.clone().with_pixel_bounds(3136, 1_003_520);
    assert!(trajectory_cost(1, 720, 1600, &big) > trajectory_cost(1, 720, 1600, &image));
}

#[test]
fn select_keeps_benchmark_order_and_whole_trajectories() {
    let dir = crate::sample::materialize_default().unwrap();
    let bench = Benchmark::load(&dir).unwrap();
    let image = ImageProcessorConfig::default();
    let mut seen = Vec::new();
    for i in 0..3 {
        let part = select(&bench, &image, ShardSpec { index: i, count: 3 });
        assert!(!part.trajectories.is_empty());
        for t in &part.trajectories {
            let orig = bench.trajectory(&t.id).unwrap();
            assert_eq!(t, orig);
            seen.push(t.line);
        }
        assert!(part.trajectories.windows(2).all(|w| w[0].line < w[1].line));
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        bench
            .trajectories
            .iter()
            .map(|t| t.line)
            .collect::<Vec<_>>()
    );
}
