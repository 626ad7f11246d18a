//! `pack`: write one folder to carry to a machine without network, or check one (`--verify BUNDLE`).

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::PackArgs;
use crate::interrupt::{shell_quote, Cancel};
use crate::model::ModelFiles;
use crate::pack::{self, ModelInput, PackInput};

/// Entry point.
pub fn run(a: PackArgs) -> Result<()> {
    if let Some(bundle) = a.verify {
        return verify(&bundle);
    }
    let (Some(model), Some(data), Some(out)) = (a.model, a.data, a.out) else {
        anyhow::bail!("pack needs --model, --data and --out (or --verify BUNDLE)");
    };
    crate::validate::model_location("--model", &model)?;
    if let Some(j) = a.judge_model.as_deref() {
        crate::validate::model_location("--judge-model", j)?;
    }
    crate::interrupt::install(); // Ctrl-C/SIGTERM stop a download or a copy between chunks
    let cancel = Cancel::on_signals();
    let hub = super::setup::hub(&a.hub, cancel.clone());
    let resolve = |flag: &str, m: &str| -> Result<ModelInput> {
        let files = ModelFiles::resolve(m, &hub).with_context(|| format!("{flag} {m}"))?;
        Ok(ModelInput {
            source: m.to_string(),
            files,
        })
    };
    let model = resolve("--model", &model)?;
    let judge = a
        .judge_model
        .as_deref()
        .map(|j| resolve("--judge-model", j))
        .transpose()?;
    let data_source = data.to_string();
    let (dir, data_hub) = super::setup::resolve_data(Some(data), &hub)?;
    let input = PackInput {
        model,
        judge,
        data_source,
        data: dir.expect("--data given"),
        data_hub,
        out: out.clone(),
        command: std::env::args()
            .map(|s| shell_quote(&s))
            .collect::<Vec<_>>()
            .join(" "),
        binary: std::env::current_exe().context("locating this program's binary")?,
    };
    let m =
        pack::write(&input, &cancel).with_context(|| format!("packing into {}", out.display()))?;
    let bytes: u64 = m.files.iter().map(|f| f.size).sum();
    println!(
        "Packed {} files ({:.1} MB) into {}: model {}{}, benchmark {} ({} trajectories, {} screenshots), the \
         binary, {} and {}.",
        m.files.len() + 1,
        bytes as f64 / 1e6,
        out.display(),
        m.model.source,
        m.judge_model
            .as_ref()
            .map_or(String::new(), |j| format!(", judge {}", j.source)),
        m.data.source,
        m.data.trajectories,
        m.data.screenshots,
        pack::BUNDLE_FILE,
        pack::SUMS_FILE
    );
    println!("{}", far_side(&out, m.judge_model.is_some()));
    Ok(())
}

/// The commands to run on the machine without network.
fn far_side(out: &Path, judge: bool) -> String {
    let b = shell_quote(&out.to_string_lossy());
    let judge = if judge {
        format!(" --judge-model {b}/{}", pack::JUDGE_DIR)
    } else {
        String::new()
    };
    format!(
        "On the other side:\n  {b}/{bin} pack --verify {b}\n  HF_HUB_OFFLINE=1 {b}/{bin} eval --model {b}/{model} \
         --data {b}/{data}{judge}",
        bin = pack::BINARY,
        model = pack::MODEL_DIR,
        data = pack::DATA_DIR,
    )
}

/// `pack --verify BUNDLE`: every file against `SHA256SUMS`; exit 1 naming each missing or damaged one.
fn verify(bundle: &Path) -> Result<()> {
    match pack::verify(bundle) {
        Ok(r) => {
            println!(
                "OK: {} files ({:.1} MB) match {}",
                r.ok,
                r.bytes as f64 / 1e6,
                bundle.join(pack::SUMS_FILE).display()
            );
            Ok(())
        }
        Err(pack::PackError::Incomplete {
            bundle,
            problems,
            hint,
        }) => {
            for p in &problems {
                eprintln!("error: {p}");
            }
            anyhow::bail!(
                "{}: {} problem(s). {hint}",
                bundle.display(),
                problems.len()
            )
        }
        Err(e) => Err(e.into()),
    }
}
