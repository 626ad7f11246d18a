use super::*;
use serde_json::json;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn partial_last_line_is_cut_and_redone() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    let p = run.path(PREDICTIONS);
    write(
        &p,
        "{\"trajectory\":\"a\",\"step\":0,\"response\":\"x\"}\n{\"trajectory\":\"a\",\"st",
    );
    assert_eq!(run.completed_steps().unwrap().len(), 1);
    let mut w = JsonlAppender::open(&p, 1).unwrap();
    w.append(&json!({"trajectory": "a", "step": 1, "response": "y"}))
        .unwrap();
    drop(w);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.ends_with("\"y\"}\n"));
    let keys = run.completed_steps().unwrap();
    assert!(keys.contains("a#0") && keys.contains("a#1"));
}

#[test]
fn errored_steps_are_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    write(
        &run.path(PREDICTIONS),
        "{\"trajectory\":3,\"step\":0,\"response\":\"\",\"error\":\"bad png\"}\n",
    );
    assert!(run.completed_steps().unwrap().is_empty());
}

#[test]
fn a_failed_start_leaves_no_folder_behind() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("runs").join("one");
    let claim = RunDir::new(&root).claim().unwrap();
    assert!(root.join(LOCK_FILE).is_file());
    drop(claim);
    assert!(
        !parent.path().join("runs").exists(),
        "created folders removed"
    );
    let claim = RunDir::new(&root).claim().unwrap();
    write(&claim.dir().path(PREDICTIONS), "");
    drop(claim);
    assert!(
        root.join(PREDICTIONS).is_file(),
        "a folder with results stays"
    );
    let fresh = RunDir::claim_fresh(&parent.path().join("fresh"), "org/m").unwrap();
    let made = fresh.dir().root().to_path_buf();
    drop(fresh);
    assert!(!made.exists() && !parent.path().join("fresh").exists());
}

#[test]
fn files_and_benchmark_folders_are_not_run_folders() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    write(&file, "x");
    let err = RunDir::new(&file).claim().unwrap_err().to_string();
    assert!(err.contains("is a file"), "{err}");
    write(&dir.path().join("data.jsonl"), "");
    let err = RunDir::new(dir.path()).claim().unwrap_err().to_string();
    assert!(err.contains("holds a benchmark"), "{err}");
}
