//! `pack` through the binary: a bundle made from the stand-in Hub (model and benchmark) and a local judge model
//! verifies (`pack --verify`, and `sha256sum -c` where installed) and runs `eval` with its own copy of the binary
//! while every connection is counted and refused (`HF_ENDPOINT` and the proxy variables at loopback listeners);
//! a damaged or cut bundle is named file by file, with the command that packed it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::hub_data::{release_like_repo, run_hub};
use crate::hub_download::tiny_a_files;
use crate::hub_support::{hub_env, Faults, MockHub, Refusing, COMMIT};
use crate::model_support::fixture;
use crate::reliability_support::sample;
use crate::util::ok;

/// A bundle of `test-org/tiny-a` and `hf:test-org/mobile-r1` from the stand-in Hub, with tiny-b as the judge.
fn pack_from_hub(home: &Path) -> PathBuf {
    let hub = MockHub::start(
        [
            ("test-org/tiny-a".to_string(), tiny_a_files()),
            (
                "datasets/test-org/mobile-r1".to_string(),
                release_like_repo(),
            ),
        ]
        .into_iter()
        .collect(),
        Faults::default(),
    );
    let bundle = home.join("bundle");
    let judge = fixture("models/tiny-b");
    let args = [
        "pack",
        "--model",
        "test-org/tiny-a",
        "--judge-model",
        judge.to_str().unwrap(),
        "--data",
        "hf:test-org/mobile-r1",
        "--out",
        bundle.to_str().unwrap(),
    ];
    let out = ok(&run_hub(&args, home, Some(&hub)));
    assert!(out.contains("pack --verify"), "{out}");
    bundle
}

/// The bundle's own binary, run with no network: `HF_ENDPOINT` and every proxy variable at counting listeners.
fn far_side(bundle: &Path, args: &[&str], offline: bool) -> Output {
    let home = tempfile::tempdir().unwrap();
    let endpoint = Refusing::start();
    let proxy = Refusing::start();
    let mut cmd = Command::new(bundle.join("bin/mobile-r1-eval"));
    cmd.args(args);
    hub_env(&mut cmd, home.path());
    cmd.env("HF_ENDPOINT", &endpoint.url);
    for var in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        cmd.env(var, &proxy.url);
    }
    if offline {
        cmd.env("HF_HUB_OFFLINE", "1");
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        endpoint.count() + proxy.count(),
        0,
        "a connection was attempted"
    );
    out
}

#[test]
fn a_bundle_verifies_and_runs_with_no_network_at_all() {
    let home = tempfile::tempdir().unwrap();
    let bundle = pack_from_hub(home.path());
    for f in [
        "model/config.json",
        "model/model.safetensors",
        "model/tokenizer.json",
        "judge-model/model.safetensors",
        "data/data.jsonl",
        "data/images/t0_s0.png",
        "bin/mobile-r1-eval",
        "bundle.json",
        "SHA256SUMS",
    ] {
        assert!(bundle.join(f).is_file(), "{f} not in the bundle");
    }
    // Only the files a run reads.
    assert!(!bundle.join("model/config.hub-style.json").exists());
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("bundle.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["model"]["commit"], Value::from(COMMIT));
    assert_eq!(manifest["data"]["hub"]["commit"], Value::from(COMMIT));

    // GNU sha256sum reads the same file.
    match Command::new("sha256sum")
        .arg("-c")
        .arg("--quiet")
        .arg("SHA256SUMS")
        .current_dir(&bundle)
        .output()
    {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout)),
        Err(_) => eprintln!("skipped: sha256sum -c (no sha256sum installed)"),
    }
    let out = ok(&far_side(
        &bundle,
        &["pack", "--verify", bundle.to_str().unwrap()],
        true,
    ));
    assert!(out.starts_with("OK:"), "{out}");

    let b = |p: &str| bundle.join(p).to_string_lossy().into_owned();
    let run = home.path().join("run");
    let eval = [
        "eval",
        "--model",
        &b("model"),
        "--judge-model",
        &b("judge-model"),
        "--data",
        &b("data"),
        "--out",
        run.to_str().unwrap(),
        "--max-pixels",
        "40000",
        "--max-new-tokens",
        "4",
    ];
    ok(&far_side(&bundle, &eval, true));
    let run_manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        run_manifest["data_source"]["repo"],
        Value::from("test-org/mobile-r1")
    );
    assert_eq!(
        run_manifest["settings"]["data_hash"],
        manifest["data"]["data_hash"]
    );
    assert!(run.join("judgements.jsonl").is_file());
    // Without HF_HUB_OFFLINE too, local folders never reach for the network.
    let validate = ["data", "validate", "--data", &b("data")];
    ok(&far_side(&bundle, &validate, false));
}

/// `pack` of local folders, offline, with `home` as the Hub cache's home.
pub(crate) fn pack_local(
    home: &Path,
    model: &Path,
    judge: Option<&Path>,
    data: &Path,
    out: &Path,
) -> Output {
    let mut cmd = crate::util::bin();
    cmd.arg("pack").arg("--model").arg(model);
    if let Some(j) = judge {
        cmd.arg("--judge-model").arg(j);
    }
    cmd.arg("--data").arg(data).arg("--out").arg(out);
    hub_env(&mut cmd, home);
    cmd.env("HF_HUB_OFFLINE", "1").output().unwrap()
}

#[test]
fn damage_and_gaps_are_named_with_the_command_that_packed_the_bundle() {
    let home = tempfile::tempdir().unwrap();
    let bundle = home.path().join("b");
    let sample = sample(home.path());
    let tiny_b = fixture("models/tiny-b");
    let pack = |out: &Path| pack_local(home.path(), &tiny_b, None, &sample, out);
    ok(&pack(&bundle));
    // A bundle is never written over another.
    let again = pack(&bundle);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    std::fs::remove_file(bundle.join("model/tokenizer.json")).unwrap();
    let img = bundle.join("data/images/t2_s1.png");
    let mut bytes = std::fs::read(&img).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&img, bytes).unwrap();
    let out = far_side(
        &bundle,
        &["pack", "--verify", bundle.to_str().unwrap()],
        true,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "model/tokenizer.json is missing",
        "data/images/t2_s1.png is damaged",
        "2 problem(s)",
        "re-pack it on the connected machine with:",
        "pack --model",
    ] {
        assert!(err.contains(want), "want `{want}` in: {err}");
    }

    // eval on the far side names the missing file and the packing command before loading anything.
    let model = bundle.join("model");
    let run = home.path().join("run");
    let eval = [
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--no-judge",
        "--out",
        run.to_str().unwrap(),
    ];
    let out = far_side(&bundle, &eval, true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("model/tokenizer.json is missing") && err.contains("pack --model"),
        "{err}"
    );
    assert!(!run.exists(), "a refused run left a run folder");

    std::fs::remove_file(bundle.join("SHA256SUMS")).unwrap();
    let out = far_side(
        &bundle,
        &["pack", "--verify", bundle.to_str().unwrap()],
        true,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("SHA256SUMS"), "{err}");
}

/// A copy of the fixture model `name` at `home/to`.
fn copied_model(home: &Path, name: &str, to: &str) -> PathBuf {
    let dir = home.join(to);
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(fixture(&format!("models/{name}"))).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    dir
}

/// `pack` failed, its message holds every `want`, and it wrote no bundle.
fn assert_refused(out: &Output, bundle: &Path, want: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for w in want {
        assert!(err.contains(w), "want `{w}` in: {err}");
    }
    assert!(
        !bundle.exists(),
        "a refused pack wrote {}",
        bundle.display()
    );
}

#[test]
fn a_checkpoint_eval_refuses_is_not_packed_and_nothing_is_written() {
    let home = tempfile::tempdir().unwrap();
    let sample = sample(home.path());
    // tiny-b with the config of a Qwen2-VL checkpoint (same fields, another architecture).
    let qwen2 = copied_model(home.path(), "tiny-b", "qwen2-vl");
    let config = std::fs::read_to_string(qwen2.join("config.json"))
        .unwrap()
        .replace(
            "Qwen2_5_VLForConditionalGeneration",
            "Qwen2VLForConditionalGeneration",
        )
        .replace("\"qwen2_5_vl\"", "\"qwen2_vl\"");
    std::fs::write(qwen2.join("config.json"), config).unwrap();
    let good = fixture("models/tiny-b");
    for (model, judge) in [
        (qwen2.as_path(), None),
        (good.as_path(), Some(qwen2.as_path())),
    ] {
        let bundle = home.path().join("bundle");
        let out = pack_local(home.path(), model, judge, &sample, &bundle);
        let want = [
            "qwen2-vl/config.json",
            "model_type \"qwen2_vl\"",
            "nothing was packed",
        ];
        assert_refused(&out, &bundle, &want);
    }
}

#[test]
fn a_benchmark_changed_in_place_is_refused_naming_the_file() {
    let home = tempfile::tempdir().unwrap();
    let bundle = home.path().join("b");
    let sample = sample(home.path());
    ok(&pack_local(
        home.path(),
        &fixture("models/tiny-b"),
        None,
        &sample,
        &bundle,
    ));
    // One letter of a string value changes case: the same size, still valid JSON.
    let data = bundle.join("data/data.jsonl");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = (3..bytes.len())
        .find(|&i| {
            let after_colon = bytes[i - 2] == b':' || bytes[i - 3..i - 1] == *b": ";
            after_colon && bytes[i - 1] == b'"' && bytes[i].is_ascii_alphabetic()
        })
        .expect("a string value");
    bytes[at] ^= 0x20;
    let size = bytes.len();
    std::fs::write(&data, bytes).unwrap();
    assert_eq!(std::fs::metadata(&data).unwrap().len() as usize, size);

    let run = home.path().join("run");
    let (model, data) = (bundle.join("model"), bundle.join("data"));
    let eval = [
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--no-judge",
        "--out",
        run.to_str().unwrap(),
    ];
    let out = far_side(&bundle, &eval, true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for want in [
        "data/data.jsonl was changed since it was packed",
        "bundle.json records",
        "pack --model",
    ] {
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
    assert!(!run.exists(), "a refused run left a run folder");
}

#[test]
fn a_checkpoint_whose_image_processor_cuts_other_patches_is_not_packed() {
    let home = tempfile::tempdir().unwrap();
    let sample = sample(home.path());
    // qwen3-tiny-a with a Qwen2.5-VL image processor (14-pixel patches) beside its 16-pixel vision tower.
    let model = copied_model(home.path(), "qwen3-tiny-a", "qwen3-patch14");
    let pre = model.join("preprocessor_config.json");
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&pre).unwrap()).unwrap();
    json["patch_size"] = 14.into();
    std::fs::write(&pre, json.to_string()).unwrap();
    let bundle = home.path().join("bundle");
    let out = pack_local(home.path(), &model, None, &sample, &bundle);
    let want = [
        "qwen3-patch14/preprocessor_config.json",
        "(14, 2, 2)",
        "expects (16, 2, 2)",
        "nothing was packed",
    ];
    assert_refused(&out, &bundle, &want);
    // The unchanged checkpoint packs.
    let good = pack_local(
        home.path(),
        &fixture("models/qwen3-tiny-a"),
        None,
        &sample,
        &bundle,
    );
    ok(&good);
}
