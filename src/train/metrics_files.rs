//! The run folder's `metrics.jsonl` and `metrics.csv`: a row per iteration, flushed as it is
//! written; a resumed run keeps the rows up to its checkpoint.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{IterationReport, TrainError, io_err};

/// `metrics.jsonl` and `metrics.csv` in the run folder, a row per iteration.
pub(super) struct MetricsFiles {
    jsonl: (PathBuf, std::fs::File),
    csv: (PathBuf, std::fs::File),
    columns: Option<Vec<String>>,
}

impl MetricsFiles {
    pub(super) fn create(dir: &Path) -> Result<Self, TrainError> {
        Self::create_named(dir, "metrics.jsonl", "metrics.csv")
    }

    /// Keeps the rows of iterations up to `upto` (a resumed run redoes the later ones):
    /// both files are rewritten through temporary files renamed into place (the CSV from the
    /// JSON rows). A last row cut short by a kill (no line end, not JSON) is dropped; its
    /// line number is returned. Any other row that does not parse is an error.
    pub(super) fn resume(dir: &Path, upto: u32) -> Result<(Self, Option<usize>), TrainError> {
        let path = dir.join("metrics.jsonl");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // A kill between the checkpoint and the first row's file: nothing to keep.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut kept = Vec::new();
        let mut torn = None;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(_) if i + 1 == lines.len() && !line.ends_with('\n') => {
                    torn = Some(i + 1);
                    continue;
                }
                Err(e) => {
                    return Err(super::RunFileError::MetricsRow {
                        path: path.to_path_buf(),
                        line: i + 1,
                        message: e.to_string(),
                    }
                    .into());
                }
            };
            if value
                .get("iteration")
                .and_then(|v| v.as_u64())
                .is_some_and(|k| k <= u64::from(upto))
            {
                kept.push(value);
            }
        }
        let mut files = Self::create_named(dir, ".metrics.jsonl.tmp", ".metrics.csv.tmp")?;
        for v in &kept {
            files.write_value(v)?;
        }
        for (from, to) in [
            (files.jsonl.0.clone(), dir.join("metrics.jsonl")),
            (files.csv.0.clone(), dir.join("metrics.csv")),
        ] {
            std::fs::rename(&from, &to).map_err(io_err(&to))?;
        }
        files.jsonl.0 = dir.join("metrics.jsonl");
        files.csv.0 = dir.join("metrics.csv");
        Ok((files, torn))
    }

    fn create_named(dir: &Path, jsonl: &str, csv: &str) -> Result<Self, TrainError> {
        let open = |name: &str| -> Result<(PathBuf, std::fs::File), TrainError> {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).map_err(io_err(&p))?;
            Ok((p, f))
        };
        Ok(Self {
            jsonl: open(jsonl)?,
            csv: open(csv)?,
            columns: None,
        })
    }

    pub(super) fn write(&mut self, r: &IterationReport) -> Result<(), TrainError> {
        let value = serde_json::to_value(r).map_err(|e| TrainError::Io {
            path: self.jsonl.0.clone(),
            io: std::io::Error::other(e),
        })?;
        self.write_value(&value)
    }

    /// Writes one row: each file's line in a single write, so a kill leaves whole rows and
    /// at most the last one cut short (which [`MetricsFiles::resume`] drops).
    fn write_value(&mut self, value: &serde_json::Value) -> Result<(), TrainError> {
        let line = format!("{value}\n");
        self.jsonl
            .1
            .write_all(line.as_bytes())
            .map_err(io_err(&self.jsonl.0))?;
        // CSV: flatten one level (team_returns.X, metrics.Y).
        let mut row: BTreeMap<String, String> = BTreeMap::new();
        if let serde_json::Value::Object(map) = value {
            for (k, v) in map {
                match v {
                    serde_json::Value::Object(inner) => {
                        for (k2, v2) in inner {
                            row.insert(format!("{k}.{k2}"), v2.to_string());
                        }
                    }
                    other => {
                        row.insert(k.clone(), other.to_string());
                    }
                }
            }
        }
        let mut out = String::new();
        if self.columns.is_none() {
            let mut c: Vec<String> = row.keys().cloned().collect();
            c.retain(|k| k != "iteration");
            c.insert(0, "iteration".into());
            let header: Vec<String> = c.iter().map(|k| csv_field(k)).collect();
            out.push_str(&header.join(","));
            out.push('\n');
            self.columns = Some(c);
        }
        let line: Vec<String> = self
            .columns
            .iter()
            .flatten()
            .map(|c| row.get(c).map_or(String::new(), |v| csv_field(v)))
            .collect();
        out.push_str(&line.join(","));
        out.push('\n');
        self.csv
            .1
            .write_all(out.as_bytes())
            .map_err(io_err(&self.csv.0))
    }
}

/// A CSV field as RFC 4180 writes it: quoted (with its quotes doubled) when it holds a comma,
/// a quote or a line break, as a team name in a column's name may.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn csv_fields_with_commas_quotes_or_breaks_are_quoted() {
        assert_eq!(csv_field("team_returns.red"), "team_returns.red");
        assert_eq!(csv_field("team_returns.a,b"), "\"team_returns.a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }

    #[test]
    fn resuming_keeps_the_rows_before_the_checkpoint_to_the_bit() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut files = MetricsFiles::create(dir.path()).expect("create");
        for i in 1..=300u32 {
            // Values like the trainer's: f32 statistics of every magnitude, widened.
            let x = f64::from(rng.random::<f32>() * 10f32.powi(rng.random_range(-12..4)));
            let row =
                serde_json::json!({"iteration": i, "approx_kl": x, "team_returns": {"a": -x}});
            files.write_value(&row).expect("write");
        }
        drop(files);
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("read");
        let (jsonl, csv) = (read("metrics.jsonl"), read("metrics.csv"));
        drop(MetricsFiles::resume(dir.path(), 200).expect("resume"));
        let head = |text: &str, n: usize| text.lines().take(n).collect::<Vec<_>>().join("\n");
        assert_eq!(head(&read("metrics.jsonl"), 300), head(&jsonl, 200));
        assert_eq!(head(&read("metrics.csv"), 300), head(&csv, 201));
    }
}
