//! Screenshot checks for `data validate`: existence, decoding, size (aspect ratio of the screen).

use std::path::PathBuf;

use super::Benchmark;

/// Relative tolerance on the aspect ratio of a screenshot versus its screen.
const ASPECT_TOLERANCE: f64 = 0.02;

/// One screenshot that failed a check.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProblem {
    /// Trajectory id.
    pub trajectory: String,
    /// 1-based line of the trajectory in `data.jsonl`.
    pub line: usize,
    /// 0-based step.
    pub step: usize,
    /// The resolved path.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ImageProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} (trajectory {}, step {}): {}: {}",
            self.line,
            self.trajectory,
            self.step,
            self.path.display(),
            self.message
        )
    }
}

/// The result of checking every screenshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageReport {
    /// Screenshots checked.
    pub checked: usize,
    /// Screenshots whose pixel size differs from the screen but keeps its aspect ratio (resized captures).
    pub resized: usize,
    /// Failures.
    pub problems: Vec<ImageProblem>,
}

impl ImageReport {
    /// No problem found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Outcome of one image: `Ok(resized)` or an error message.
fn check_one(path: &PathBuf, screen: [u32; 2]) -> Result<bool, String> {
    if !path.is_file() {
        return Err("file not found".into());
    }
    let img = image::ImageReader::open(path)
        .map_err(|e| e.to_string())?
        .with_guessed_format()
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| format!("cannot decode: {e}"))?;
    check_size([img.width(), img.height()], screen)
}

/// Whether a screenshot of `[w, h]` pixels fits a `screen`: `Ok(false)` the same size, `Ok(true)` resized with the
/// screen's aspect ratio, else what is wrong. Writers of benchmark folders call it too.
pub(crate) fn check_size([w, h]: [u32; 2], screen: [u32; 2]) -> Result<bool, String> {
    if [w, h] == screen {
        return Ok(false);
    }
    let a = w as f64 / h as f64;
    let b = screen[0] as f64 / screen[1] as f64;
    if (a / b - 1.0).abs() > ASPECT_TOLERANCE {
        return Err(format!(
            "size {w}x{h} does not match the {}x{} screen (aspect ratio)",
            screen[0], screen[1]
        ));
    }
    Ok(true)
}

/// Check every screenshot of the benchmark, decoding in parallel over the available cores.
pub(super) fn validate(bench: &Benchmark) -> ImageReport {
    struct Job {
        traj: usize,
        step: usize,
        path: PathBuf,
        screen: [u32; 2],
    }
    let jobs: Vec<Job> = bench
        .trajectories
        .iter()
        .enumerate()
        .flat_map(|(ti, t)| {
            t.steps.iter().enumerate().map(move |(si, s)| Job {
                traj: ti,
                step: si,
                path: bench.resolve(&s.image),
                screen: [t.image_width, t.image_height],
            })
        })
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let chunk = jobs.len().div_ceil(threads).max(1);
    let results: Vec<Result<bool, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|j| check_one(&j.path, j.screen))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err("checker thread panicked".into())])
            })
            .collect()
    });
    let mut report = ImageReport {
        checked: jobs.len(),
        ..Default::default()
    };
    for (job, r) in jobs.iter().zip(results) {
        match r {
            Ok(true) => report.resized += 1,
            Ok(false) => {}
            Err(message) => {
                let t = &bench.trajectories[job.traj];
                report.problems.push(ImageProblem {
                    trajectory: t.id.clone(),
                    line: t.line,
                    step: job.step,
                    path: job.path.clone(),
                    message,
                });
            }
        }
    }
    report
}
