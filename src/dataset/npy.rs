//! The NumPy `.npy` format (versions 1.0 to 3.0), just enough for `gene_order.npy`: a
//! one-dimensional little-endian int32 array in C order.

use crate::error::{Error, Result};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy pads the header so that the data starts on a multiple of this.
const ARRAY_ALIGN: usize = 64;
/// NumPy leaves room for the shape to grow to this many digits without rewriting the header.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// A `.npy` (format 1.0) holding `values` as a 1-D `<i4` array, byte for byte what
/// `numpy.save(f, np.asarray(values, dtype='<i4'))` writes.
pub fn write_i32(values: &[i32]) -> Vec<u8> {
    let n = values.len().to_string();
    let mut dict = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({n},), }}");
    dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(n.len())));
    // magic (6) + version (2) + header length (2) + dict + padding + '\n'
    let unpadded = MAGIC.len() + 2 + 2 + dict.len() + 1;
    let pad = ARRAY_ALIGN - unpadded % ARRAY_ALIGN;
    let header_len = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(unpadded + pad + 4 * values.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Reads a `.npy` that must hold a 1-D `<i4` array of `expected_len` elements in C order.
/// `name` names the file in messages.
pub fn read_i32(bytes: &[u8], expected_len: u64, name: &str) -> Result<Vec<i32>> {
    let bad = |rule: String| Error::format(format!("{name}: {rule}"));
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("not a NumPy .npy file (bad magic)".into()));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (header_len, start): (usize, usize) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad("truncated .npy header".into()));
            }
            (
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
                12,
            )
        }
        _ => {
            return Err(Error::unsupported(format!(
                "{name}: .npy format version {major}.{minor}; this build reads 1.0 to 3.0"
            )))
        }
    };
    if minor != 0 {
        return Err(Error::unsupported(format!(
            "{name}: .npy format version {major}.{minor}; this build reads 1.0 to 3.0"
        )));
    }
    let data_start = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad(format!("header of {header_len} bytes runs past the end")))?;
    let header = std::str::from_utf8(&bytes[start..data_start])
        .map_err(|_| bad("header is not valid text".into()))?;
    let dict = parse_header(header).map_err(|r| bad(format!("header {header:?}: {r}")))?;
    if dict.descr != "<i4" {
        return Err(bad(format!(
            "dtype is '{}', must be '<i4' (little-endian int32)",
            dict.descr
        )));
    }
    if dict.fortran_order {
        return Err(bad("fortran_order is True, must be False".into()));
    }
    if dict.shape.len() != 1 || dict.shape[0] != expected_len {
        return Err(bad(format!(
            "shape is {:?}, must be ({expected_len},) (n_genes)",
            dict.shape
        )));
    }
    let data = &bytes[data_start..];
    if data.len() as u64 != 4 * expected_len {
        return Err(bad(format!(
            "holds {} data bytes, a ({expected_len},) int32 array needs {}",
            data.len(),
            4 * expected_len
        )));
    }
    Ok(data
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect())
}

#[derive(Debug, Default)]
struct HeaderDict {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// Parses the Python dict literal of a `.npy` header:
/// `{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }` plus padding.
fn parse_header(text: &str) -> std::result::Result<HeaderDict, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let mut out = HeaderDict::default();
    let (mut descr, mut fortran, mut shape) = (false, false, false);
    p.ws();
    p.expect(b'{')?;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => {
                out.descr = p.string()?;
                descr = true;
            }
            "fortran_order" => {
                out.fortran_order = p.boolean()?;
                fortran = true;
            }
            "shape" => {
                out.shape = p.tuple()?;
                shape = true;
            }
            other => return Err(format!("unexpected key '{other}'")),
        }
        p.ws();
        if p.eat(b',') {
            continue;
        }
        p.ws();
        p.expect(b'}')?;
        break;
    }
    p.ws();
    if p.i != p.s.len() {
        return Err("trailing characters after the dict".into());
    }
    for (have, key) in [
        (descr, "descr"),
        (fortran, "fortran_order"),
        (shape, "shape"),
    ] {
        if !have {
            return Err(format!("missing key '{key}'"));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at offset {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at offset {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            if self.s[self.i] == b'\\' {
                return Err("escapes in header strings are not supported".into());
            }
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err("unterminated string".into());
        }
        let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(out)
    }
    fn boolean(&mut self) -> std::result::Result<bool, String> {
        for (word, v) in [("True", true), ("False", false)] {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(format!("expected True or False at offset {}", self.i))
    }
    fn tuple(&mut self) -> std::result::Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(out);
            }
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            // Python 2 era files may write long integers as "5L".
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap();
            let v: u64 = digits
                .parse()
                .map_err(|_| format!("expected a dimension at offset {start}"))?;
            self.eat(b'L');
            out.push(v);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v = vec![3, 0, 2, 1, -5];
        let b = write_i32(&v);
        assert_eq!((b.len() - 4 * v.len()) % ARRAY_ALIGN, 0);
        assert_eq!(read_i32(&b, 5, "x").unwrap(), v);
        assert_eq!(
            read_i32(&b, 4, "x").unwrap_err().kind,
            crate::ErrorKind::Format
        );
    }

    #[test]
    fn header_variants() {
        assert_eq!(
            parse_header("{'shape': (7,), 'fortran_order': False, 'descr': '<i4'}")
                .unwrap()
                .shape,
            vec![7]
        );
        assert_eq!(
            parse_header("{\"descr\": \"<i4\", \"fortran_order\": True, \"shape\": (2, 3), }\n")
                .unwrap()
                .shape,
            vec![2, 3]
        );
        assert!(parse_header("{'descr': '<i4', 'shape': (7,)}").is_err());
        assert!(parse_header("{'descr': '<i4', 'fortran_order': False, 'shape': (7,)} x").is_err());
    }
}
