//! Kill loop (issue 19, item 5): the dataset writer, the ChromData writer (every layout, as a
//! directory and as `.cdz`) and the converter (`deltacells convert`) are killed with SIGKILL
//! at random moments, writing a new target or replacing an existing one. After each kill,
//! what is at the target opens whole (the old output, or the new one if the kill came after
//! the publish) or nothing is there; the next write succeeds and leaves nothing but the
//! target (it removes the killed writer's temporaries).
//!
//! The writers run in a child process: this test binary again, in `child_writer`, with
//! `DC_KILL_CHILD` set. `DC_KILL_ITERATIONS` is the number of kills per writer (default 4 in
//! CI: 4 x 8 writers; the test mode of docs/reliability.md is `DC_KILL_ITERATIONS=100`).

mod dataset_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use dataset_support::*;
use deltacells::chromdata::{ChromData, ChromDataWriter, Columns, Layout};
use deltacells::dataset::{Dataset, DatasetWriter};

fn iterations() -> usize {
    std::env::var("DC_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4)
}

/// Generation g of the dataset (0: the existing target, 1: the new one).
fn dataset_input(g: u64) -> Csr {
    random_csr(
        &mut Rng::new(50 + g),
        2500 + 700 * g as usize,
        300,
        0.05,
        false,
    )
}

fn write_dataset_gen(path: &Path, g: u64, overwrite: bool) {
    let input = dataset_input(g);
    let mut opts = test_options(128);
    opts.overwrite = overwrite;
    opts.threads = 1;
    let mut w = DatasetWriter::create(path, input.n_genes, opts).unwrap();
    append_in_pieces(&mut w, &input, &mut Rng::new(g));
    w.finish().unwrap();
}

/// Whether the dataset at `path` is generation `g`, every cell checked.
fn dataset_is(path: &Path, g: u64) -> bool {
    let Ok(ds) = Dataset::open(path) else {
        return false;
    };
    let input = dataset_input(g);
    if ds.info().n_cells != input.n_rows() as u64 {
        return false;
    }
    let cells: Vec<u64> = (0..input.n_rows() as u64).collect();
    check_gather(&ds, &input, None, &cells);
    true
}

fn spots(g: u64) -> RecordBatch {
    let n = 3000 + 500 * g as usize;
    let mut r = Rng::new(g + 9);
    let chroms = ["chr1", "chr2", "chrX"];
    let chrom: Vec<&str> = (0..n).map(|_| chroms[r.below(3) as usize]).collect();
    let start: Vec<i64> = (0..n).map(|_| r.below(50) as i64 * 1000).collect();
    let end: Vec<i64> = start.iter().map(|s| s + 1000).collect();
    let trace: Vec<String> = (0..n).map(|_| format!("t{}", r.below(40))).collect();
    let cell: Vec<i64> = (0..n).map(|i| (i % 4) as i64).collect();
    let x = vec![g as f64; n];
    let y: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("chrom", Arc::new(StringArray::from(chrom))),
        ("start", Arc::new(Int64Array::from(start))),
        ("end", Arc::new(Int64Array::from(end))),
        ("trace_id", Arc::new(StringArray::from(trace))),
        ("cell_id", Arc::new(Int64Array::from(cell))),
        ("x", Arc::new(Float64Array::from(x))),
        ("y", Arc::new(Float64Array::from(y.clone()))),
        ("z", Arc::new(Float64Array::from(y))),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

fn write_store_gen(path: &Path, layout: Layout, g: u64, overwrite: bool) {
    let opts = deltacells::chromdata::WriterOptions {
        layout,
        overwrite,
        threads: 1,
        row_group_size: 256,
        coords_row_group_size: 128,
        memory_budget: 16 << 20,
        ..Default::default()
    };
    let mut w = ChromDataWriter::create(path, opts).unwrap();
    let b = spots(g);
    let half = b.num_rows() / 2;
    w.append(b.slice(0, half)).unwrap();
    w.append(b.slice(half, b.num_rows() - half)).unwrap();
    w.finish().unwrap();
}

/// Whether the store at `path` is generation `g` (every spot read).
fn store_is(path: &Path, g: u64) -> bool {
    let Ok(cd) = ChromData::open(path) else {
        return false;
    };
    let b = cd.read_spots(false, &Columns::All).unwrap();
    let x = b.column_by_name("x").unwrap();
    let x = x.as_any().downcast_ref::<Float64Array>().unwrap();
    b.num_rows() == spots(g).num_rows() && x.iter().all(|v| v == Some(g as f64))
}

const INPUT_10X: &str = "tests/data/scrna/10x-v3-1107-cells-chr21";

fn convert_cmd(target: &Path, overwrite: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deltacells"));
    c.arg("convert")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(INPUT_10X))
        .arg(target)
        .args([
            "--tile-size",
            "64",
            "--chunks",
            "4",
            "--level",
            "3",
            "--quiet",
        ])
        .args(["--threads", "1"]);
    if overwrite {
        c.arg("--overwrite");
    }
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// The child's side: one write, described by the environment.
#[test]
fn child_writer() {
    let Ok(what) = std::env::var("DC_KILL_CHILD") else {
        return;
    };
    let target = std::env::var("DC_KILL_TARGET").unwrap();
    let overwrite = std::env::var("DC_KILL_OVERWRITE").is_ok();
    let target = Path::new(&target);
    match what.as_str() {
        "dataset" => write_dataset_gen(target, 1, overwrite),
        l => write_store_gen(target, layout(l), 1, overwrite),
    }
}

fn layout(name: &str) -> Layout {
    match name {
        "flat" => Layout::Flat,
        "partitioned" => Layout::Partitioned,
        _ => Layout::PrimaryCoords,
    }
}

/// One writer under test: its name, target name, how to start it as a child process.
struct Writer {
    name: &'static str,
    target: &'static str,
}

impl Writer {
    fn command(&self, target: &Path, overwrite: bool) -> Command {
        if self.name == "convert" {
            return convert_cmd(target, overwrite);
        }
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_writer", "--quiet", "--test-threads", "1"])
            .env("DC_KILL_CHILD", self.name.split('-').next().unwrap())
            .env("DC_KILL_TARGET", target);
        if overwrite {
            c.env("DC_KILL_OVERWRITE", "1");
        }
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    fn write_old(&self, target: &Path) {
        match self.name.split('-').next().unwrap() {
            "dataset" | "convert" => write_dataset_gen(target, 0, false),
            l => write_store_gen(target, layout(l), 0, false),
        }
    }

    /// Whether the target holds generation g whole.
    fn is(&self, target: &Path, g: u64) -> bool {
        match self.name.split('-').next().unwrap() {
            "dataset" => dataset_is(target, g),
            "convert" if g == 1 => Dataset::open(target).is_ok_and(|d| {
                d.info().n_cells == 1107 && d.verify_obs().is_ok() && d.var_names().is_ok()
            }),
            "convert" => dataset_is(target, g),
            _ => store_is(target, g),
        }
    }
}

const WRITERS: [Writer; 8] = [
    Writer {
        name: "dataset",
        target: "ds",
    },
    Writer {
        name: "flat-dir",
        target: "s.chromdata.zarr",
    },
    Writer {
        name: "flat-cdz",
        target: "s.cdz",
    },
    Writer {
        name: "partitioned-dir",
        target: "s.chromdata.zarr",
    },
    Writer {
        name: "partitioned-cdz",
        target: "s.cdz",
    },
    Writer {
        name: "primary-dir",
        target: "s.chromdata.zarr",
    },
    Writer {
        name: "primary-cdz",
        target: "s.cdz",
    },
    Writer {
        name: "convert",
        target: "ds",
    },
];

#[test]
fn writers_killed_at_random_moments_leave_nothing_partial() {
    let n = iterations();
    let mut rng = Rng::new(0x4b11);
    for w in &WRITERS {
        let dir = TempDir::new(&format!("kill-{}", w.name));
        let target = dir.join(w.target);
        // How long an uninterrupted write takes: the kills fall within 1.2 times that.
        let t0 = Instant::now();
        assert!(
            w.command(&target, false).status().unwrap().success(),
            "{}",
            w.name
        );
        let span = t0.elapsed().as_micros() as u64 * 6 / 5 + 1;
        let (mut before, mut after) = (0, 0);
        for i in 0..n {
            std::fs::remove_dir_all(dir.path()).unwrap();
            std::fs::create_dir_all(dir.path()).unwrap();
            let overwrite = i % 2 == 1;
            if overwrite {
                w.write_old(&target);
            }
            let mut child = w.command(&target, overwrite).spawn().unwrap();
            std::thread::sleep(Duration::from_micros(rng.below(span)));
            let _ = child.kill(); // SIGKILL (an error: it had already exited)
            child.wait().unwrap();
            if w.is(&target, 1) {
                after += 1;
            } else {
                before += 1;
                if overwrite {
                    assert!(
                        w.is(&target, 0),
                        "{} kill {i}: the old target is damaged",
                        w.name
                    );
                } else {
                    assert!(
                        !target.exists(),
                        "{} kill {i}: something partial is at the target",
                        w.name
                    );
                }
            }
            // The next run succeeds and cleans up after the killed one.
            let st = w.command(&target, true).status().unwrap();
            assert!(st.success(), "{} kill {i}: the next write fails", w.name);
            assert!(w.is(&target, 1), "{} kill {i}: the next write", w.name);
            assert_eq!(
                dir.entries(),
                [w.target],
                "{} kill {i}: left behind",
                w.name
            );
        }
        eprintln!(
            "{}: {n} kills, {before} before the publish, {after} after",
            w.name
        );
    }
}
