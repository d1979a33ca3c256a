//! A run folder's safety: one process at a time (an advisory lock on `RUN/.lock`, which the
//! kernel releases when its holder dies, however it dies), leftovers of killed writes
//! removed, and files made durable before the rename that publishes them (the data and the
//! folder entries flushed to the disk, the way databases make a rename survive a power
//! loss).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::{TrainError, io_err};

/// The lock file's name in a run folder.
pub const LOCK: &str = ".lock";

/// The exclusive lock on a run folder, held while the value lives.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Takes the lock on `run` (creating the folder and its lock file as needed) and writes
    /// this process's id into it; `Err` names the process that holds it.
    pub fn acquire(run: &Path) -> Result<Self, TrainError> {
        std::fs::create_dir_all(run).map_err(io_err(run))?;
        let path = run.join(LOCK);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() {
                    "another process".to_string()
                } else {
                    format!("process {holder}")
                };
                return Err(super::RunFolderError::InUse {
                    path: run.to_path_buf(),
                    who: who.to_string(),
                }
                .into());
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&path)(e)),
        }
        file.set_len(0).map_err(io_err(&path))?;
        file.rewind().map_err(io_err(&path))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(io_err(&path))?;
        Ok(Self { _file: file })
    }
}

/// Whether `dir` holds nothing but what a run killed before it wrote its `config.json`
/// leaves (its lock file, and temporary files); such a folder may start a fresh run.
pub fn is_fresh(dir: &Path) -> Result<bool, TrainError> {
    if !dir.exists() {
        return Ok(true);
    }
    let mut has_lock = false;
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let name = e.map_err(io_err(dir))?.file_name();
        let name = name.to_string_lossy();
        if name == LOCK {
            has_lock = true;
        } else if !(name.starts_with('.') && name.contains(".partial-")) {
            return Ok(false);
        }
    }
    // Temporary files alone, without our lock, are somebody else's.
    Ok(has_lock
        || std::fs::read_dir(dir)
            .map_err(io_err(dir))?
            .next()
            .is_none())
}

/// Removes the temporary files and folders (`.NAME.partial-PID`) that killed processes left
/// in `dir` (the run folder or its `checkpoints`); the caller holds the run's lock, so no
/// live process is writing them. Returns what was removed.
pub fn remove_leftovers(dir: &Path) -> Result<Vec<PathBuf>, TrainError> {
    let mut removed = Vec::new();
    if !dir.is_dir() {
        return Ok(removed);
    }
    let me = std::process::id();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix('.')
            .and_then(|n| n.rsplit_once(".partial-"))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || process_lives(pid) {
            continue;
        }
        let path = e.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io_err(&path))?;
        } else {
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
        removed.push(path);
    }
    removed.sort();
    Ok(removed)
}

/// Whether process `pid` is alive (Linux: its `/proc` entry; elsewhere assumed dead, which
/// the run lock makes safe).
fn process_lives(pid: u32) -> bool {
    cfg!(target_os = "linux") && Path::new("/proc").join(pid.to_string()).exists()
}

/// Flushes every file under `dir` and every folder's entries to the disk.
pub fn sync_tree(dir: &Path) -> Result<(), TrainError> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = e.map_err(io_err(dir))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&path))?;
        }
    }
    sync_dir(dir)
}

/// Flushes a folder's entries (a rename into it, a file created in it) to the disk.
pub fn sync_dir(dir: &Path) -> Result<(), TrainError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(io_err(dir))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Writes `bytes` to `path` durably: into a temporary file in the same folder, flushed, then
/// renamed over `path`, and the folder flushed; a kill leaves the old file or the new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or("file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.partial-{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_is_free_once_released() {
        let dir = tempfile::tempdir().expect("tmp");
        let run = dir.path().join("run");
        let held = RunLock::acquire(&run).expect("first");
        let err = RunLock::acquire(&run).expect_err("held").to_string();
        assert!(
            err.contains(&format!("in use by process {}", std::process::id())),
            "{err}"
        );
        drop(held);
        RunLock::acquire(&run).expect("released");
        assert!(
            is_fresh(&run).expect("read"),
            "a lock alone is a fresh folder"
        );
    }

    #[test]
    fn leftovers_of_dead_processes_go_and_others_stay() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        // Process ids above the kernel's pid_max (4194304) are never alive.
        std::fs::create_dir_all(d.join(".iter_4.partial-999999999")).expect("mkdir");
        std::fs::write(d.join(".config.json.partial-999999998"), "x").expect("write");
        let mine = d.join(format!(".iter_5.partial-{}", std::process::id()));
        std::fs::create_dir_all(&mine).expect("mkdir");
        std::fs::create_dir_all(d.join("iter_2")).expect("mkdir");
        std::fs::write(d.join("notes.partial-1"), "user's").expect("write");
        let gone = remove_leftovers(d).expect("clean");
        assert_eq!(
            gone,
            vec![
                d.join(".config.json.partial-999999998"),
                d.join(".iter_4.partial-999999999")
            ]
        );
        assert!(mine.exists() && d.join("iter_2").exists() && d.join("notes.partial-1").exists());
        assert!(!is_fresh(d).expect("read"));
    }

    #[test]
    fn an_atomic_write_replaces_the_whole_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("config.json");
        std::fs::write(&p, "old").expect("write");
        write_atomic(&p, b"new").expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 1);
        sync_tree(dir.path()).expect("sync");
    }
}
