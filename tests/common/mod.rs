//! Test helpers: a seeded RNG, random CSR matrices, and an independent tile assembler /
//! parser written from the format text (deliberately not sharing code with src/tile).
#![allow(dead_code, clippy::needless_range_loop)]

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// splitmix64
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// A CSR matrix owned by a test (rows = cells).
#[derive(Debug, Clone, PartialEq)]
pub struct Csr {
    pub n_genes: u32,
    pub indptr: Vec<i64>,
    pub indices: Vec<i32>,
    pub values: Vec<i32>,
}

impl Csr {
    pub fn from_rows(n_genes: u32, rows: &[Vec<(i32, i32)>]) -> Csr {
        let mut c = Csr {
            n_genes,
            indptr: vec![0],
            indices: vec![],
            values: vec![],
        };
        for r in rows {
            for &(g, v) in r {
                c.indices.push(g);
                c.values.push(v);
            }
            c.indptr.push(c.indices.len() as i64);
        }
        c
    }
    pub fn n_cells(&self) -> usize {
        self.indptr.len() - 1
    }
    pub fn as_ref(&self) -> deltacells::tile::CsrRef<'_> {
        deltacells::tile::CsrRef {
            n_genes: self.n_genes,
            indptr: &self.indptr,
            indices: &self.indices,
            values: &self.values,
        }
    }
}

/// Random canonical CSR: `density` in [0,1] per gene, counts mostly small.
pub fn random_csr(rng: &mut Rng, n_cells: usize, n_genes: u32, mean_nnz: u64) -> Csr {
    let mut rows = Vec::with_capacity(n_cells);
    for _ in 0..n_cells {
        let k = rng.below(2 * mean_nnz + 1).min(n_genes as u64);
        let mut genes: Vec<i32> = (0..k).map(|_| rng.below(n_genes as u64) as i32).collect();
        genes.sort_unstable();
        genes.dedup();
        rows.push(
            genes
                .into_iter()
                .map(|g| {
                    let scale = 1 + rng.below(64);
                    (g, 1 + rng.below(scale) as i32)
                })
                .collect(),
        );
    }
    Csr::from_rows(n_genes, &rows)
}

/// Decodes a tile with the library, int32 values.
pub fn decode_i32(blob: &[u8], threads: usize) -> deltacells::Result<Csr> {
    let t = deltacells::tile::Tile::parse(blob, true)?;
    let n = t.header.nnz as usize;
    let mut c = Csr {
        n_genes: t.header.n_genes,
        indptr: vec![0; t.header.n_cells as usize + 1],
        indices: vec![0; n],
        values: vec![0; n],
    };
    deltacells::tile::decode_parsed(
        &t,
        threads,
        &mut c.indptr,
        &mut c.indices,
        deltacells::tile::ValuesOut::I32(&mut c.values),
    )?;
    Ok(c)
}

// ---- independent assembler, from the format text ----

pub fn planes(v: &[u16]) -> Vec<u8> {
    let mut out: Vec<u8> = v.iter().map(|x| (*x & 0xff) as u8).collect();
    out.extend(v.iter().map(|x| (*x >> 8) as u8));
    out
}

pub fn frame(raw: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(raw, 3).unwrap()
}

pub fn exception_raw(exc: &[(u32, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (p, _) in exc {
        out.extend_from_slice(&p.to_le_bytes());
    }
    for (_, v) in exc {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// One chunk to assemble: its cell range and its four streams (already compressed; an
/// empty exception stream means none).
#[derive(Clone)]
pub struct RawChunk {
    pub cell_lo: u64,
    pub cell_hi: u64,
    pub gaps: Vec<u8>,
    pub vals: Vec<u8>,
    pub vexc: Vec<u8>,
    pub gexc: Vec<u8>,
}

/// Lays out a tile exactly as the format describes: header, table, indptr, 8-aligned streams.
pub fn assemble(n_genes: u32, indptr: &[i64], chunks: &[RawChunk]) -> Vec<u8> {
    let n_cells = indptr.len() - 1;
    let table = 64 + 96 * chunks.len();
    let indptr_off = table.div_ceil(8) * 8;
    let mut body = vec![0u8; indptr_off + 8 * (n_cells + 1)];
    for (i, v) in indptr.iter().enumerate() {
        body[indptr_off + 8 * i..indptr_off + 8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    for (c, ch) in chunks.iter().enumerate() {
        let mut fields = vec![
            ch.cell_lo,
            ch.cell_hi,
            indptr[ch.cell_lo as usize] as u64,
            indptr[ch.cell_hi as usize] as u64,
        ];
        for s in [&ch.gaps, &ch.vals, &ch.vexc, &ch.gexc] {
            if s.is_empty() {
                fields.extend([0, 0]);
                continue;
            }
            while !body.len().is_multiple_of(8) {
                body.push(0);
            }
            fields.extend([body.len() as u64, s.len() as u64]);
            body.extend_from_slice(s);
        }
        for (i, f) in fields.iter().enumerate() {
            let at = 64 + 96 * c + 8 * i;
            body[at..at + 8].copy_from_slice(&f.to_le_bytes());
        }
    }
    let total = body.len();
    body[0..8].copy_from_slice(b"DELTACEL");
    put_u32(&mut body, 8, 2);
    put_u64(&mut body, 16, n_cells as u64);
    put_u64(&mut body, 24, *indptr.last().unwrap() as u64);
    put_u32(&mut body, 32, n_genes);
    put_u32(&mut body, 36, chunks.len() as u32);
    put_u64(&mut body, 40, indptr_off as u64);
    put_u64(&mut body, 48, total as u64);
    reseal(&mut body);
    body
}

/// The streams of a chunk holding cells [lo, hi) of `csr`, built from the format text.
pub fn raw_chunk(csr: &Csr, lo: usize, hi: usize) -> RawChunk {
    let (mut gaps, mut vals, mut vexc, mut gexc) = (vec![], vec![], vec![], vec![]);
    let base = csr.indptr[lo] as usize;
    for cell in lo..hi {
        let mut prev = 0i64;
        for j in csr.indptr[cell] as usize..csr.indptr[cell + 1] as usize {
            let g = csr.indices[j] as i64;
            let gap = g - prev;
            prev = g;
            if gap > 65535 {
                gexc.push(((j - base) as u32, (gap - 65535) as u32));
                gaps.push(65535);
            } else {
                gaps.push(gap as u16);
            }
            let v = csr.values[j];
            if v > 65535 {
                vexc.push(((j - base) as u32, v as u32));
                vals.push(65535);
            } else {
                vals.push(v as u16);
            }
        }
    }
    let opt = |e: &Vec<(u32, u32)>| {
        if e.is_empty() {
            vec![]
        } else {
            frame(&exception_raw(e))
        }
    };
    RawChunk {
        cell_lo: lo as u64,
        cell_hi: hi as u64,
        gaps: frame(&planes(&gaps)),
        vals: frame(&planes(&vals)),
        vexc: opt(&vexc),
        gexc: opt(&gexc),
    }
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Recomputes the CRC after a deliberate corruption, so the structural check under test
/// is the one that fires.
pub fn reseal(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[64..]);
    put_u32(b, 56, crc);
}

/// Offset of chunk table field `f` (0..12) of chunk `c`.
pub fn entry(c: usize, f: usize) -> usize {
    64 + 96 * c + 8 * f
}

/// Independent parser: decompresses the tile's streams without the library and rebuilds
/// the CSR.
pub fn parse_independently(b: &[u8]) -> Csr {
    assert_eq!(&b[..8], b"DELTACEL");
    let n_cells = get_u64(b, 16) as usize;
    let n_chunks = get_u32(b, 36) as usize;
    let indptr_off = get_u64(b, 40) as usize;
    let indptr: Vec<i64> = (0..=n_cells)
        .map(|i| get_u64(b, indptr_off + 8 * i) as i64)
        .collect();
    let mut out = Csr {
        n_genes: get_u32(b, 32),
        indptr: indptr.clone(),
        indices: vec![0; *indptr.last().unwrap() as usize],
        values: vec![0; *indptr.last().unwrap() as usize],
    };
    for c in 0..n_chunks {
        let f = |i: usize| get_u64(b, entry(c, i)) as usize;
        let (cell_lo, cell_hi, nnz_lo, nnz_hi) = (f(0), f(1), f(2), f(3));
        let n = nnz_hi - nnz_lo;
        let stream = |i: usize| -> Vec<u8> {
            let (off, len) = (f(4 + 2 * i), f(5 + 2 * i));
            if len == 0 {
                return vec![];
            }
            assert_eq!(off % 8, 0, "stream not 8-aligned");
            zstd::bulk::decompress(&b[off..off + len], 1 << 30).unwrap()
        };
        let (gaps, vals, vexc, gexc) = (stream(0), stream(1), stream(2), stream(3));
        assert_eq!(gaps.len(), 2 * n);
        assert_eq!(vals.len(), 2 * n);
        let u16_at = |p: &[u8], i: usize| p[i] as i64 | (p[n + i] as i64) << 8;
        let mut gene = vec![0i64; n];
        for cell in cell_lo..cell_hi {
            let mut acc = 0i64;
            for j in indptr[cell] as usize - nnz_lo..indptr[cell + 1] as usize - nnz_lo {
                acc += u16_at(&gaps, j);
                gene[j] = acc;
            }
        }
        let k = gexc.len() / 8;
        for e in 0..k {
            let p = get_u32(&gexc, 4 * e) as usize;
            let extra = get_u32(&gexc, 4 * (k + e)) as i64;
            let cell = (cell_lo..cell_hi)
                .find(|&c| (indptr[c + 1] as usize - nnz_lo) > p)
                .unwrap();
            for g in &mut gene[p..indptr[cell + 1] as usize - nnz_lo] {
                *g += extra;
            }
        }
        let mut val: Vec<i64> = (0..n).map(|i| u16_at(&vals, i)).collect();
        let k = vexc.len() / 8;
        for e in 0..k {
            let p = get_u32(&vexc, 4 * e) as usize;
            val[p] = get_u32(&vexc, 4 * (k + e)) as i64;
        }
        for j in 0..n {
            out.indices[nnz_lo + j] = gene[j] as i32;
            out.values[nnz_lo + j] = val[j] as i32;
        }
    }
    out
}
