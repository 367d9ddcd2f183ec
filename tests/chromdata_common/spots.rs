//! The synthetic spots of the ChromData writer tests (chromdata_writer.rs,
//! remote_chromdata_writer.rs): a deterministic generator, input batches in any split, and
//! what the reader must return, computed from the logical data.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float32Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray,
};

/// A deterministic pseudo-random generator (no dependency).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Logical spots in input order, with everything needed to build batches and the
/// expected reader answer.
pub struct Spots {
    pub chrom: Vec<String>,
    pub start: Vec<i64>,
    pub trace: Vec<String>,
    pub cell: Vec<i64>,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub z: Vec<f64>,
    pub status: Vec<Option<String>>,
    pub spot_id: Vec<i64>,
    pub probe: Vec<String>,
    pub fov: Vec<i32>,
    pub score: Vec<Option<f32>>,
    pub flag: Vec<Option<bool>>,
    pub tag: Vec<String>,
    pub track: Vec<f64>,
    pub raw: [Vec<f32>; 3],
}

pub const CHROMS: [&str; 4] = ["chr2", "chr10", "chr1", "chr X"];

pub fn make_spots(n: usize, seed: u64) -> Spots {
    let mut r = Rng(seed | 1);
    let mut s = Spots {
        chrom: vec![],
        start: vec![],
        trace: vec![],
        cell: vec![],
        x: vec![],
        y: vec![],
        z: vec![],
        status: vec![],
        spot_id: vec![],
        probe: vec![],
        fov: vec![],
        score: vec![],
        flag: vec![],
        tag: vec![],
        track: vec![],
        raw: [vec![], vec![], vec![]],
    };
    for i in 0..n {
        let ch = r.below(CHROMS.len() as u64) as usize;
        let b = r.below(9) as i64;
        let cell = 100 - r.below(6) as i64 * 7;
        s.chrom.push(CHROMS[ch].to_string());
        s.start.push(b * 5000);
        s.trace.push(format!("t{}", r.below(13)));
        s.cell.push(cell);
        let mut x = r.unit() * 10.0;
        if i % 11 == 0 {
            x = f64::NAN;
        }
        s.x.push(x);
        s.y.push(r.unit());
        s.z.push(-r.unit());
        s.status.push(match r.below(4) {
            0 => None,
            1 => Some("ok".into()),
            2 => Some("lowq".into()),
            _ => Some("missing".into()),
        });
        s.spot_id.push(i as i64 * 3 + 1);
        s.probe.push(format!("p{}:{}", CHROMS[ch], b));
        s.fov.push((cell * 10 + 3) as i32);
        s.score.push(if i % 5 == 0 {
            None
        } else {
            Some(r.unit() as f32)
        });
        s.flag.push(if i % 7 == 0 {
            None
        } else {
            Some(r.below(2) == 1)
        });
        s.tag.push(format!("uniq{i}"));
        s.track.push(r.unit());
        for a in 0..3 {
            s.raw[a].push(r.unit() as f32);
        }
    }
    s
}

pub fn batch_of(s: &Spots, lo: usize, hi: usize) -> RecordBatch {
    let st = |v: &[String]| Arc::new(StringArray::from_iter_values(v[lo..hi].iter())) as ArrayRef;
    // A categorical as R and pandas send it: every batch carries the same dictionary (the
    // whole category list), which the first batch fixes (C API 6.1).
    const STATUS: [&str; 3] = ["lowq", "missing", "ok"];
    let keys: arrow_array::Int8Array = s.status[lo..hi]
        .iter()
        .map(|v| {
            v.as_deref()
                .map(|v| STATUS.iter().position(|c| *c == v).unwrap() as i8)
        })
        .collect();
    let status = DictionaryArray::<arrow_array::types::Int8Type>::try_new(
        keys,
        Arc::new(StringArray::from(STATUS.to_vec())),
    )
    .unwrap();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("chrom", st(&s.chrom)),
        (
            "start",
            Arc::new(Int64Array::from(s.start[lo..hi].to_vec())),
        ),
        (
            "end",
            Arc::new(Int64Array::from_iter_values(
                s.start[lo..hi].iter().map(|v| v + 5000),
            )),
        ),
        ("trace_id", st(&s.trace)),
        (
            "cell_id",
            Arc::new(Int64Array::from(s.cell[lo..hi].to_vec())),
        ),
        ("x", Arc::new(Float64Array::from(s.x[lo..hi].to_vec()))),
        ("y", Arc::new(Float64Array::from(s.y[lo..hi].to_vec()))),
        ("z", Arc::new(Float64Array::from(s.z[lo..hi].to_vec()))),
        ("coord_status", Arc::new(status)),
        (
            "spot_id",
            Arc::new(Int64Array::from(s.spot_id[lo..hi].to_vec())),
        ),
        ("probe", st(&s.probe)),
        ("fov", Arc::new(Int32Array::from(s.fov[lo..hi].to_vec()))),
        (
            "score",
            Arc::new(Float32Array::from(s.score[lo..hi].to_vec())),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(s.flag[lo..hi].to_vec())),
        ),
        ("odd name/tag", st(&s.tag)),
        (
            "spot_tracks/intensity",
            Arc::new(Float64Array::from(s.track[lo..hi].to_vec())),
        ),
        (
            "layers/raw/x",
            Arc::new(Float32Array::from(s.raw[0][lo..hi].to_vec())),
        ),
        (
            "layers/raw/y",
            Arc::new(Float32Array::from(s.raw[1][lo..hi].to_vec())),
        ),
        (
            "layers/raw/z",
            Arc::new(Float32Array::from(s.raw[2][lo..hi].to_vec())),
        ),
    ];
    super::batch(cols)
}

/// What `read_spots(original_order = true)` must return, computed directly from the
/// logical data: bins derived in (chrom name, start) order, categoricals decoded.
pub fn expected(s: &Spots, coord_f32: bool) -> RecordBatch {
    let mut loci: Vec<(String, i64)> = s
        .chrom
        .iter()
        .cloned()
        .zip(s.start.iter().copied())
        .collect();
    loci.sort();
    loci.dedup();
    let bin_id: Vec<i32> = (0..s.chrom.len())
        .map(|i| {
            loci.binary_search(&(s.chrom[i].clone(), s.start[i]))
                .unwrap() as i32
        })
        .collect();
    let strs = |v: &[String]| Arc::new(StringArray::from_iter_values(v.iter())) as ArrayRef;
    let coord = |v: &[f64]| -> ArrayRef {
        if coord_f32 {
            Arc::new(Float32Array::from_iter_values(v.iter().map(|x| *x as f32)))
        } else {
            Arc::new(Float64Array::from(v.to_vec()))
        }
    };
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("bin_id", Arc::new(Int32Array::from(bin_id))),
        ("trace_id", strs(&s.trace)),
        ("cell_id", Arc::new(Int64Array::from(s.cell.clone()))),
        ("x", coord(&s.x)),
        ("y", coord(&s.y)),
        ("z", coord(&s.z)),
        (
            "coord_status",
            Arc::new(StringArray::from(
                s.status.iter().map(|v| v.as_deref()).collect::<Vec<_>>(),
            )),
        ),
        ("spot_id", Arc::new(Int64Array::from(s.spot_id.clone()))),
        ("probe", strs(&s.probe)),
        ("fov", Arc::new(Int32Array::from(s.fov.clone()))),
        ("score", Arc::new(Float32Array::from(s.score.clone()))),
        ("flag", Arc::new(BooleanArray::from(s.flag.clone()))),
        ("odd name/tag", strs(&s.tag)),
        (
            "spot_tracks/intensity",
            Arc::new(Float64Array::from(s.track.clone())),
        ),
        (
            "layers/raw/x",
            Arc::new(Float32Array::from(s.raw[0].clone())),
        ),
        (
            "layers/raw/y",
            Arc::new(Float32Array::from(s.raw[1].clone())),
        ),
        (
            "layers/raw/z",
            Arc::new(Float32Array::from(s.raw[2].clone())),
        ),
    ];
    super::batch(cols)
}
