//! Reading NumPy `.npy` arrays through a memory map.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;

use crate::{Error, Result};

/// Element types fateplan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    I64,
    I32,
    F64,
    F32,
    Bool,
    U8,
}

impl Dtype {
    /// As the file's `descr` spells it.
    pub fn descr(self) -> &'static str {
        match self {
            Dtype::I64 => "<i8",
            Dtype::I32 => "<i4",
            Dtype::F64 => "<f8",
            Dtype::F32 => "<f4",
            Dtype::Bool => "|b1",
            Dtype::U8 => "|u1",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::I64 | Dtype::F64 => 8,
            Dtype::I32 | Dtype::F32 => 4,
            Dtype::Bool | Dtype::U8 => 1,
        }
    }
}

/// A memory-mapped `.npy` array, little-endian, C or Fortran order.
#[derive(Debug)]
pub struct Npy {
    map: Mmap,
    offset: usize,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub fortran_order: bool,
}

impl Npy {
    /// Maps `path` and reads its header; the file must hold exactly the
    /// elements its shape declares, no fewer and no more.
    pub fn open(path: &Path) -> Result<Npy> {
        // Mapping a folder fails with "No such device", and opening a pipe
        // waits for a writer: said plainly instead, before opening.
        let kind = std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .file_type();
        if !kind.is_file() {
            let what = match kind.is_dir() {
                true => "a folder",
                false => "not a regular file",
            };
            return Err(Error::invalid(
                path,
                "file",
                format!("is {what}, where a .npy file was expected"),
            ));
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // Safety: the map is read-only and the file is not expected to change
        // while it is read; a concurrent writer could only corrupt values,
        // which every reader bounds-checks.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| match e.raw_os_error() {
            // No address space left for the map (`ulimit -v`).
            Some(libc::ENOMEM) => Error::OutOfMemory {
                bytes: file.metadata().map_or(0, |m| m.len()),
                what: format!("the address space to map {}", path.display()),
            },
            _ => Error::io(path, e),
        })?;
        let (offset, dtype, shape, fortran_order) = parse_header(&map, path)?;
        // Checked: a shape whose product wraps would pass the size check
        // below with a count far smaller than it declares.
        let needed = shape
            .iter()
            .try_fold(1u64, |count, &dim| count.checked_mul(dim))
            .and_then(|count| count.checked_mul(dtype.size() as u64))
            .and_then(|b| b.checked_add(offset as u64))
            .ok_or_else(|| Error::invalid(path, "shape", format!("{shape:?} is too large")))?;
        let file_bytes = map.len() as u64;
        if file_bytes < needed {
            return Err(Error::invalid(
                path,
                "data",
                format!("shape {shape:?} needs {needed} bytes but the file has {file_bytes}"),
            ));
        }
        // Bytes past the declared elements would be dropped unsaid: the
        // shape or the data is not what was meant.
        if file_bytes > needed {
            return Err(Error::invalid(
                path,
                "data",
                format!(
                    "shape {shape:?} needs {needed} bytes but the file has {file_bytes}: {} \
                     bytes more than the shape declares",
                    file_bytes - needed
                ),
            ));
        }
        Ok(Npy {
            map,
            offset,
            dtype,
            shape,
            fortran_order,
        })
    }

    pub fn len(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flat index of element `(row, column)` of a 2-D array, in either order.
    pub fn index2(&self, row: u64, column: u64) -> usize {
        if self.fortran_order {
            (column * self.shape[0] + row) as usize
        } else {
            (row * self.shape[1] + column) as usize
        }
    }

    fn data(&self) -> &[u8] {
        &self.map[self.offset..]
    }

    /// The element bytes, exactly `len() * dtype.size()` of them.
    fn elements(&self) -> &[u8] {
        &self.data()[..self.len() as usize * self.dtype.size()]
    }

    /// Puts a 2-D Fortran-order array's values into row-major order; other
    /// arrays are already in it (1-D) or are rejected.
    fn row_major<T: Copy + Default>(&self, values: Vec<T>, path: &Path) -> Result<Vec<T>> {
        if !self.fortran_order || self.shape.len() < 2 {
            return Ok(values);
        }
        if self.shape.len() > 2 {
            return Err(Error::invalid(
                path,
                "fortran_order",
                format!(
                    "True with shape {:?}; fateplan reads Fortran order for 2-D arrays only",
                    self.shape
                ),
            ));
        }
        let (rows, columns) = (self.shape[0] as usize, self.shape[1] as usize);
        let mut out = crate::error::room(values.len(), || {
            format!("{} in row-major order", path.display())
        })?;
        out.resize(values.len(), T::default());
        for (column, chunk) in values.chunks_exact(rows.max(1)).enumerate() {
            for (row, &value) in chunk.iter().enumerate() {
                out[row * columns + column] = value;
            }
        }
        Ok(out)
    }

    /// Every element as f32 in row-major order, from `<f4` or `<f8` (f64
    /// values are rounded to the nearest f32).
    pub fn to_f32(&self, path: &Path) -> Result<Vec<f32>> {
        let bytes = self.elements();
        let room =
            || crate::error::room(self.len() as usize, || format!("{} as f32", path.display()));
        let values = match self.dtype {
            Dtype::F32 => filled(
                room()?,
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
            ),
            Dtype::F64 => filled(
                room()?,
                bytes
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32),
            ),
            other => {
                return Err(Error::invalid(
                    path,
                    "descr",
                    format!("{} is not a float type; expected <f4 or <f8", other.descr()),
                ))
            }
        };
        self.row_major(values, path)
    }

    /// For an `<f8` array: how many of its values are not 0 but round to
    /// 0 as f32 (their magnitude is under f32's least, about 1.4e-45),
    /// and the first of them by flat index in the file, with its value;
    /// none for other types or where no value does.
    pub fn flushed_to_zero(&self) -> Option<(u64, u64, f64)> {
        if self.dtype != Dtype::F64 {
            return None;
        }
        let flushed = |b: &[u8]| {
            let v = f64::from_le_bytes(b.try_into().expect("8 bytes"));
            v != 0.0 && v as f32 == 0.0
        };
        let bytes = self.elements();
        let count = bytes.par_chunks_exact(8).filter(|b| flushed(b)).count() as u64;
        if count == 0 {
            return None;
        }
        let first = bytes.par_chunks_exact(8).position_first(flushed)?;
        let value =
            f64::from_le_bytes(bytes[first * 8..first * 8 + 8].try_into().expect("8 bytes"));
        Some((count, first as u64, value))
    }

    /// Row and column of flat index `at` in the file of a 2-D array, in
    /// either order: the inverse of [`Npy::index2`].
    pub fn position2(&self, at: u64) -> (u64, u64) {
        match self.fortran_order {
            true => (at % self.shape[0].max(1), at / self.shape[0].max(1)),
            false => (at / self.shape[1].max(1), at % self.shape[1].max(1)),
        }
    }

    /// Rows `ids` of a 2-D `<f4` or `<f8` array, in that order, as f32
    /// (row-major, f64 values rounded to the nearest f32), read from the
    /// mapped file without reading the others.
    pub fn rows_f32(&self, ids: &[u64], path: &Path) -> Result<Vec<f32>> {
        if self.shape.len() != 2 {
            return Err(Error::invalid(
                path,
                "shape",
                format!("{:?}; expected [N, F]", self.shape),
            ));
        }
        let (rows, columns) = (self.shape[0], self.shape[1] as usize);
        if let Some(&row) = ids.iter().find(|&&row| row >= rows) {
            return Err(Error::invalid(
                path,
                "shape",
                format!("{:?} has no row {row}", self.shape),
            ));
        }
        let data = self.data();
        let value: fn(&[u8], usize) -> f32 = match self.dtype {
            Dtype::F32 => {
                |d, at| f32::from_le_bytes(d[at * 4..at * 4 + 4].try_into().expect("4 bytes"))
            }
            Dtype::F64 => |d, at| {
                f64::from_le_bytes(d[at * 8..at * 8 + 8].try_into().expect("8 bytes")) as f32
            },
            other => {
                return Err(Error::invalid(
                    path,
                    "descr",
                    format!("{} is not a float type; expected <f4 or <f8", other.descr()),
                ))
            }
        };
        let mut out = vec![0f32; ids.len() * columns];
        if columns == 0 {
            return Ok(out);
        }
        out.par_chunks_mut(columns)
            .zip(ids.par_iter())
            .for_each(|(row, &id)| {
                for (column, v) in row.iter_mut().enumerate() {
                    *v = value(data, self.index2(id, column as u64));
                }
            });
        Ok(out)
    }

    /// Lets go of the file's pages this process has read through the map
    /// (they stay in the page cache, and are read again if wanted), so
    /// that they no longer count in its resident memory.
    pub fn release(&self) {
        // Safety: the map is shared and read-only, so dropping its pages
        // loses nothing: a later read faults them in from the file again.
        // Advice is a hint; a system that refuses it keeps the pages.
        let _ = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }

    /// Lets go of the pages holding elements `(row, c)` for `c` in
    /// `columns` of a 2-D array (and any pages between them), as
    /// [`Npy::release`] lets go of all.
    pub fn release_row_range(&self, row: u64, columns: std::ops::Range<u64>) {
        if columns.is_empty() || self.shape.len() != 2 {
            return;
        }
        let size = self.dtype.size();
        let first = self.offset + self.index2(row, columns.start) * size;
        let end = self.offset + (self.index2(row, columns.end - 1) + 1) * size;
        // Safety: as for `release`; the range is rounded out to whole
        // pages (neighbours' too, which are read again if wanted), and it
        // lies inside the map, whose size `open` checked.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                first,
                end.saturating_sub(first),
            )
        };
    }

    /// Every element as i64 in row-major order, from `<i8`, `<i4` or
    /// `|u1` (labels of up to 256 classes are often saved as bytes).
    pub fn to_i64(&self, path: &Path) -> Result<Vec<i64>> {
        let bytes = self.elements();
        let room =
            || crate::error::room(self.len() as usize, || format!("{} as i64", path.display()));
        let values = match self.dtype {
            Dtype::I64 => filled(
                room()?,
                bytes
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))),
            ),
            Dtype::I32 => filled(
                room()?,
                bytes
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")) as i64),
            ),
            Dtype::U8 => filled(room()?, bytes.iter().map(|&b| i64::from(b))),
            other => {
                return Err(Error::invalid(
                    path,
                    "descr",
                    format!(
                        "{} is not a type labels are read from; expected <i8, <i4 or |u1",
                        other.descr()
                    ),
                ))
            }
        };
        self.row_major(values, path)
    }

    /// Elements `(row, c)` for `c` in `columns` of a 2-D integer array
    /// (`<i8` or `<i4`, either order), as i64.
    pub fn row_ints(
        &self,
        row: u64,
        columns: std::ops::Range<u64>,
        path: &Path,
    ) -> Result<Vec<i64>> {
        if self.shape.len() != 2 || row >= self.shape[0] || columns.end > self.shape[1] {
            return Err(Error::invalid(
                path,
                "shape",
                format!(
                    "{:?} has no elements ({row}, {}..{})",
                    self.shape, columns.start, columns.end
                ),
            ));
        }
        let data = self.data();
        let at = |c: u64| self.index2(row, c);
        // A row of a C-order array (or a one-row Fortran one) lies in one
        // run of bytes: read as such, a loop the compiler vectorises.
        let contiguous = !self.fortran_order || self.shape[0] == 1;
        if contiguous && !columns.is_empty() {
            let size = self.dtype.size();
            let bytes = &data[at(columns.start) * size..(at(columns.end - 1) + 1) * size];
            match self.dtype {
                Dtype::I64 => {
                    return Ok(bytes
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect())
                }
                Dtype::I32 => {
                    return Ok(bytes
                        .chunks_exact(4)
                        .map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))))
                        .collect())
                }
                _ => {}
            }
        }
        match self.dtype {
            Dtype::I64 => Ok(columns
                .map(|c| {
                    let i = at(c) * 8;
                    i64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"))
                })
                .collect()),
            Dtype::I32 => Ok(columns
                .map(|c| {
                    let i = at(c) * 4;
                    i64::from(i32::from_le_bytes(
                        data[i..i + 4].try_into().expect("4 bytes"),
                    ))
                })
                .collect()),
            other => Err(Error::invalid(
                path,
                "descr",
                format!(
                    "{} is not an integer type; expected <i8 or <i4",
                    other.descr()
                ),
            )),
        }
    }

    /// Every element as a bool in row-major order, from `|b1` or `|u1`
    /// holding only 0 and 1.
    pub fn to_bool(&self, path: &Path) -> Result<Vec<bool>> {
        if !matches!(self.dtype, Dtype::Bool | Dtype::U8) {
            return Err(Error::invalid(
                path,
                "descr",
                format!(
                    "{} is not a boolean type; expected |b1 or |u1",
                    self.dtype.descr()
                ),
            ));
        }
        let bytes = self.elements();
        if let Some(at) = bytes.iter().position(|&b| b > 1) {
            return Err(Error::invalid(
                path,
                format!("element {at}"),
                format!("{} is neither 0 nor 1", bytes[at]),
            ));
        }
        self.row_major(bytes.iter().map(|&b| b == 1).collect(), path)
    }

    /// Element `index` as a u64 (integer arrays; negative values are an error).
    pub fn int(&self, index: usize, path: &Path) -> Result<u64> {
        let data = self.data();
        let value: i64 = match self.dtype {
            Dtype::I64 => {
                i64::from_le_bytes(data[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
            }
            Dtype::I32 => {
                i32::from_le_bytes(data[index * 4..index * 4 + 4].try_into().expect("4 bytes"))
                    as i64
            }
            Dtype::U8 => i64::from(data[index]),
            other => {
                return Err(Error::invalid(
                    path,
                    "descr",
                    format!(
                        "{} is not a type labels are read from; expected <i8, <i4 or |u1",
                        other.descr()
                    ),
                ))
            }
        };
        u64::try_from(value).map_err(|_| {
            // Named as `train` names it: `y[5]` of y.npy.
            let stem = path.file_stem().map(|s| s.to_string_lossy());
            Error::invalid(
                path,
                format!("{}[{index}]", stem.as_deref().unwrap_or("element")),
                format!("{value} is negative"),
            )
        })
    }
}

fn parse_header(bytes: &[u8], path: &Path) -> Result<(usize, Dtype, Vec<u64>, bool)> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(Error::invalid(path, "magic", "not a .npy file"));
    }
    let major = bytes[6];
    let (length, start): (usize, usize) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
            12,
        ),
        _ => {
            return Err(Error::invalid(
                path,
                "version",
                format!("{major} is not a supported .npy version"),
            ))
        }
    };
    let end = start.checked_add(length).filter(|&e| e <= bytes.len());
    let Some(end) = end else {
        return Err(Error::invalid(
            path,
            "header",
            format!("length {length} runs past the end of the file"),
        ));
    };
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| Error::invalid(path, "header", "is not text"))?;
    // A Python dict literal of exactly `descr`, `fortran_order` and
    // `shape`: numpy writes `'key': value`, and reads double quotes too.
    let entries = header_entries(header, path)?;
    let field = |name: &str| -> Result<&str> {
        entries
            .iter()
            .find(|(key, _)| *key == name)
            .map(|&(_, value)| value)
            .ok_or_else(|| Error::invalid(path, name, "missing from the header"))
    };
    let descr = field("descr")?;
    let descr = match descr.chars().next() {
        Some(quote @ ('\'' | '"')) => descr[1..]
            .strip_suffix(quote)
            .filter(|inner| !inner.contains(quote))
            .unwrap_or(descr),
        Some('[') => {
            // A list of (name, type) fields: quoted whole, to its bracket.
            let mut depth = 0usize;
            let end = descr
                .char_indices()
                .find_map(|(at, c)| {
                    match c {
                        '[' => depth += 1,
                        ']' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(at + 1)
                })
                .unwrap_or(descr.len());
            return Err(Error::invalid(
                path,
                "descr",
                format!(
                    "{}: a structured dtype (named fields), which fateplan does not read; it \
                     reads arrays of one type: <i8, <i4, <f8, <f4, |b1 or |u1",
                    &descr[..end]
                ),
            ));
        }
        _ => {
            return Err(Error::invalid(
                path,
                "descr",
                format!(
                    "{:?} is not a type string such as '<f4'",
                    descr.chars().take(40).collect::<String>()
                ),
            ))
        }
    };
    let dtype = match descr {
        "<i8" => Dtype::I64,
        "<i4" => Dtype::I32,
        "<f8" => Dtype::F64,
        "<f4" => Dtype::F32,
        "|b1" => Dtype::Bool,
        "|u1" => Dtype::U8,
        other => {
            // A big-endian array of a type read little-endian: say how
            // to save it so.
            let swapped = other
                .strip_prefix('>')
                .map(|rest| format!("<{rest}"))
                .filter(|little| ["<i8", "<i4", "<f8", "<f4"].contains(&little.as_str()));
            let hint = match swapped {
                Some(little) => format!(
                    "; it is {little} stored big-endian: save it little-endian (numpy: \
                     a.astype('{little}'))"
                ),
                None => String::new(),
            };
            return Err(Error::invalid(
                path,
                "descr",
                format!("{other:?}; fateplan reads <i8, <i4, <f8, <f4, |b1 and |u1{hint}"),
            ));
        }
    };
    let fortran_order = match field("fortran_order")? {
        "True" => true,
        "False" => false,
        other => {
            return Err(Error::invalid(
                path,
                "fortran_order",
                format!("{other:?} is neither True nor False"),
            ))
        }
    };
    let shape = field("shape")?;
    let inside = shape
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            Error::invalid(
                path,
                "shape",
                format!(
                    "{:?} is not a tuple",
                    shape.chars().take(40).collect::<String>()
                ),
            )
        })?;
    // numpy's tuples: `()`, `(5,)`, `(2, 3)`; one comma may end them.
    let inside = inside.trim();
    let inside = inside.strip_suffix(',').unwrap_or(inside);
    let shape = inside
        .split(',')
        .map(str::trim)
        .filter(|_| !inside.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| Error::invalid(path, "shape", format!("{s:?} is not a dimension")))
        })
        .collect::<Result<Vec<u64>>>()?;
    Ok((end, dtype, shape, fortran_order))
}

/// The header's dict, `{'key': value, ...}`, as (key, value text) pairs:
/// each key quoted and given once, one of `descr`, `fortran_order` and
/// `shape`; a value runs to the comma or brace that closes it outside
/// quotes and brackets. Anything else is refused, naming what.
fn header_entries<'h>(header: &'h str, path: &Path) -> Result<Vec<(&'h str, &'h str)>> {
    const KEYS: [&str; 3] = ["descr", "fortran_order", "shape"];
    let bad = |what: String| Error::invalid(path, "header", what);
    let text = header.trim();
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| {
            let head: String = text.chars().take(60).collect();
            // Where the dict opens but does not close, its end says why
            // (NUL bytes padding it, say, past what the head shows).
            let chars = text.chars().count();
            match text.starts_with('{') && chars > 60 {
                true => {
                    let tail: String = text.chars().skip(chars - 12).collect();
                    bad(format!(
                        "{head:?}... is not a dict in braces: it ends in {tail:?}, not '}}' \
                         (padding is spaces, then a newline)"
                    ))
                }
                false => bad(format!("{head:?} is not a dict in braces")),
            }
        })?;
    let mut entries: Vec<(&str, &str)> = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let quote = rest.chars().next().filter(|c| matches!(c, '\'' | '"'));
        let Some(quote) = quote else {
            return Err(bad(format!(
                "{:?}: a key is not quoted",
                rest.chars().take(40).collect::<String>()
            )));
        };
        let close = rest[1..]
            .find(quote)
            .ok_or_else(|| bad("a key's quote is not closed".into()))?;
        let key = &rest[1..1 + close];
        if !KEYS.contains(&key) {
            return Err(bad(format!(
                "{key:?} is not a key of a .npy header (descr, fortran_order, shape)"
            )));
        }
        if entries.iter().any(|(k, _)| *k == key) {
            return Err(bad(format!("{key:?} is given twice")));
        }
        rest = rest[close + 2..].trim_start();
        rest = rest
            .strip_prefix(':')
            .ok_or_else(|| bad(format!("{key:?} is not followed by ':'")))?
            .trim_start();
        // The value: to the first comma outside quotes and brackets.
        let (mut depth, mut quoted) = (0usize, None::<char>);
        let mut end = rest.len();
        for (at, c) in rest.char_indices() {
            match (quoted, c) {
                (Some(q), c) if c == q => quoted = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quoted = Some(c),
                (None, '(' | '[' | '{') => depth += 1,
                (None, ')' | ']' | '}') => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| bad(format!("{key:?}: an unmatched {c:?}")))?;
                }
                (None, ',') if depth == 0 => {
                    end = at;
                    break;
                }
                _ => {}
            }
        }
        if quoted.is_some() || depth > 0 {
            return Err(bad(format!("{key:?}: a quote or bracket is not closed")));
        }
        let value = rest[..end].trim();
        if value.is_empty() {
            return Err(bad(format!("{key:?} has no value")));
        }
        entries.push((key, value));
        rest = rest[end..].strip_prefix(',').unwrap_or("").trim_start();
    }
    Ok(entries)
}

/// Writes a v1 `.npy` file: `descr` is numpy's type string (`<f4`, `<i8`,
/// `|b1`), `data` the little-endian elements in row-major order.
pub fn write(path: &Path, descr: &str, shape: &[u64], data: &[u8]) -> Result<()> {
    let temporary = write_temporary(path, descr, shape, data)?;
    let renamed = std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        Error::io(path, e)
    });
    crate::cleanup::unregister(&temporary);
    renamed
}

/// [`write()`]'s file, written whole beside `path` under a temporary name
/// (returned) for the caller to rename into place and then
/// [`crate::cleanup::unregister`]: a write that fails (a full disk)
/// removes it, so that no truncated array is left, and an interruption
/// removes it until then.
pub fn write_temporary(path: &Path, descr: &str, shape: &[u64], data: &[u8]) -> Result<PathBuf> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    write_with_header(path, header, data)
}

/// Writes a v1 `.npy` file whose header is the dict literal `header`,
/// padded as numpy pads it, and then `data`, to a temporary file beside
/// `path`, returned.
fn write_with_header(path: &Path, mut header: String, data: &[u8]) -> Result<PathBuf> {
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    let (temporary, mut file) = crate::cleanup::create(path).map_err(|e| Error::io(path, e))?;
    use std::io::Write as _;
    file.write_all(&bytes).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        crate::cleanup::unregister(&temporary);
        Error::io(path, e)
    })?;
    Ok(temporary)
}

/// `values` pushed into `out`, a buffer made with room for them all
/// (so that none is allocated on the way).
fn filled<T>(mut out: Vec<T>, values: impl Iterator<Item = T>) -> Vec<T> {
    out.extend(values);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a v1 `.npy` file.
    pub fn write_npy(path: &Path, descr: &str, shape: &[u64], data: &[u8]) {
        super::write(path, descr, shape, data).unwrap();
    }

    #[test]
    fn reads_header_and_values() {
        let dir = std::env::temp_dir().join(format!("fateplan-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npy");
        let values: Vec<u8> = [3i64, 1, 4, 1, 5, 9]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&path, "<i8", &[2, 3], &values);
        let array = Npy::open(&path).unwrap();
        assert_eq!(array.shape, vec![2, 3]);
        assert_eq!(array.int(5, &path).unwrap(), 9);
        assert_eq!(array.int(array.index2(1, 0), &path).unwrap(), 1);
        write_npy(&path, "<i8", &[2, 30], &values);
        assert!(Npy::open(&path).unwrap_err().to_string().contains("needs"));
        std::fs::write(&path, b"not numpy").unwrap();
        assert!(Npy::open(&path)
            .unwrap_err()
            .to_string()
            .contains("not a .npy"));
        // A big-endian array of a type read little-endian says how to
        // save it; another type only lists the ones read.
        write_npy(&path, ">f4", &[2], &[0; 8]);
        let error = Npy::open(&path).unwrap_err().to_string();
        assert!(
            error.contains("a.npy") && error.contains("it is <f4 stored big-endian"),
            "{error}"
        );
        write_npy(&path, "<f2", &[2], &[0; 4]);
        let error = Npy::open(&path).unwrap_err().to_string();
        assert!(
            error.contains("|u1") && !error.contains("big-endian"),
            "{error}"
        );
        // A folder by that name is said to be one, and a named pipe is
        // refused before it is opened (which would wait for a writer).
        let folder = dir.join("x.npy");
        std::fs::create_dir(&folder).unwrap();
        let error = Npy::open(&folder).unwrap_err().to_string();
        assert!(
            error.contains("x.npy")
                && error.contains("is a folder, where a .npy file was expected"),
            "{error}"
        );
        let pipe = dir.join("y.npy");
        let made = std::process::Command::new("mkfifo").arg(&pipe).status();
        if made.is_ok_and(|s| s.success()) {
            let error = Npy::open(&pipe).unwrap_err().to_string();
            assert!(error.contains("is not a regular file"), "{error}");
        } else {
            eprintln!("skipped the named pipe: mkfifo did not run here");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn converts_floats_ints_and_bools_in_row_major_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let f64s: Vec<u8> = [1.5f64, -2.0, 3.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&path, "<f8", &[3], &f64s);
        assert_eq!(
            Npy::open(&path).unwrap().to_f32(&path).unwrap(),
            vec![1.5, -2.0, 3.25]
        );
        let message = Npy::open(&path)
            .unwrap()
            .to_i64(&path)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("<f8 is not a type labels are read from; expected <i8, <i4 or |u1"),
            "{message}"
        );
        let i32s: Vec<u8> = [7i32, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        write_npy(&path, "<i4", &[2, 1], &i32s);
        assert_eq!(
            Npy::open(&path).unwrap().to_i64(&path).unwrap(),
            vec![7, -1]
        );
        write_npy(&path, "|u1", &[3], &[1, 0, 1]);
        let npy = Npy::open(&path).unwrap();
        assert_eq!(npy.to_bool(&path).unwrap(), vec![true, false, true]);
        // Bytes read as labels too.
        assert_eq!(npy.to_i64(&path).unwrap(), vec![1, 0, 1]);
        assert_eq!(npy.int(2, &path).unwrap(), 1);
        write_npy(&path, "|u1", &[3], &[1, 0, 2]);
        let message = Npy::open(&path)
            .unwrap()
            .to_bool(&path)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("element 2") && message.contains("2 is neither"),
            "{message}"
        );
        // Fortran order: the file holds columns one after another.
        let column_major: Vec<u8> = [1i64, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_fortran_npy(&path, "<i8", &[2, 3], &column_major);
        assert_eq!(
            Npy::open(&path).unwrap().to_i64(&path).unwrap(),
            vec![1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn rows_are_read_in_either_order_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.npy");
        // [[1, 2, 3], [4, 5, 6]], columns one after another, as f64.
        let column_major: Vec<u8> = [1f64, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_fortran_npy(&path, "<f8", &[2, 3], &column_major);
        let npy = Npy::open(&path).unwrap();
        assert_eq!(
            npy.rows_f32(&[1, 0, 1], &path).unwrap(),
            [4.0, 5.0, 6.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert!(npy.rows_f32(&[], &path).unwrap().is_empty());
        let message = npy.rows_f32(&[0, 2], &path).unwrap_err().to_string();
        assert!(message.contains("has no row 2"), "{message}");
        let row_major: Vec<u8> = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&path, "<f4", &[3, 2], &row_major);
        let npy = Npy::open(&path).unwrap();
        assert_eq!(npy.rows_f32(&[2, 0], &path).unwrap(), [5.0, 6.0, 1.0, 2.0]);
        write_npy(&path, "<i8", &[1, 2], &[0u8; 16]);
        let npy = Npy::open(&path).unwrap();
        let message = npy.rows_f32(&[0], &path).unwrap_err().to_string();
        assert!(message.contains("not a float type"), "{message}");
    }

    /// Writes a v1 `.npy` file whose header is the dict literal `dict`,
    /// as written.
    fn write_npy_header(path: &Path, dict: &str, data: &[u8]) {
        let temporary = super::write_with_header(path, dict.to_string(), data).unwrap();
        std::fs::rename(&temporary, path).unwrap();
        crate::cleanup::unregister(&temporary);
    }

    #[test]
    fn a_shape_whose_element_count_overflows_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge_index.npy");
        // (2, 2^63) wraps to 0 elements; (2^54 + 4, 1024) to 4,096, which
        // 16 KiB of floats would hold.
        let cases: [(&str, Vec<u64>, Vec<u8>); 2] = [
            ("<i8", vec![2, 1 << 63], Vec::new()),
            ("<f4", vec![(1 << 54) + 4, 1024], vec![0u8; 4096 * 4]),
        ];
        for (descr, shape, data) in cases {
            write_npy(&path, descr, &shape, &data);
            let message = Npy::open(&path).unwrap_err().to_string();
            assert!(
                message.contains("edge_index.npy")
                    && message.contains("shape")
                    && message.contains(&format!("{shape:?} is too large")),
                "{message}"
            );
        }
    }

    #[test]
    fn more_data_than_the_shape_declares_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // x.npy declaring (10, 4) and holding 44 floats; edge_index.npy
        // declaring (2, 2) and holding 6 ints.
        let cases = [
            ("x.npy", "<f4", 4, vec![10, 4], vec![0u8; 44 * 4]),
            ("edge_index.npy", "<i8", 8, vec![2, 2], vec![0u8; 6 * 8]),
        ];
        for (name, descr, size, shape, data) in cases {
            let path = dir.path().join(name);
            write_npy(&path, descr, &shape, &data);
            let file_bytes = std::fs::metadata(&path).unwrap().len();
            let declared: u64 = shape.iter().product::<u64>() * size;
            let needed = file_bytes - data.len() as u64 + declared;
            let message = Npy::open(&path).unwrap_err().to_string();
            assert!(
                message.contains(name)
                    && message.contains(&format!("{shape:?}"))
                    && message.contains(&format!("needs {needed} bytes"))
                    && message.contains(&format!("has {file_bytes}")),
                "{message}"
            );
        }
    }

    /// A scratch folder, `a.npy` in it, and four i64 values' bytes.
    fn four_longs() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let values = [3i64, 1, 4, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        (dir, path, values)
    }

    #[test]
    fn a_header_that_is_not_a_dict_of_its_three_keys_is_refused() {
        let (_dir, path, values) = four_longs();
        for (dict, says) in [
            (
                "{'descr': '<i8', 'fortran_order': True, 'fortran_order': False, 'shape': (2, 2), }",
                "\"fortran_order\" is given twice",
            ),
            (
                "garbage 'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }",
                "is not a dict in braces",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }\0\0\0",
                "it ends in \"(2, 2), }\\0\\0\\0\", not '}'",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), ",
                "is not a dict in braces",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), 'extra': 1, }",
                "\"extra\" is not a key",
            ),
            (
                "{'descr': '<i8', 'fortran_order': Maybe, 'shape': (2, 2), }",
                "fortran_order: \"Maybe\" is neither True nor False",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2) junk, }",
                "is not a tuple",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2, }",
                "not closed",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, 'shape': (2,,2), }",
                "shape: \"\" is not a dimension",
            ),
            (
                "{'descr': '<i8', 'fortran_order': False, }",
                "shape: missing from the header",
            ),
        ] {
            write_npy_header(&path, dict, &values);
            let message = Npy::open(&path).unwrap_err().to_string();
            assert!(
                message.contains("a.npy") && message.contains(says),
                "{dict}: {message}"
            );
        }
    }

    #[test]
    fn headers_in_either_quote_style_are_read_and_structured_types_named() {
        let (_dir, path, values) = four_longs();
        for dict in [
            r#"{"descr": "<i8", "fortran_order": False, "shape": (2, 2), }"#,
            r#"{'descr': "<i8", "fortran_order" : False, 'shape': (2, 2)}"#,
        ] {
            write_npy_header(&path, dict, &values);
            let npy = Npy::open(&path).unwrap_or_else(|e| panic!("{dict}: {e}"));
            assert_eq!(
                (npy.dtype, &npy.shape[..]),
                (Dtype::I64, &[2, 2][..]),
                "{dict}"
            );
            assert_eq!(npy.to_i64(&path).unwrap(), [3, 1, 4, 1], "{dict}");
        }
        // A structured type is named as such, its descr quoted whole.
        for (dict, descr) in [
            (
                "{'descr': [('a','<i8')], 'fortran_order': False, 'shape': (4,), }",
                "[('a','<i8')]",
            ),
            (
                r#"{"descr": [("a", "<i4"), ("b", "<i4")], "fortran_order": False, "shape": (4,), }"#,
                r#"[("a", "<i4"), ("b", "<i4")]"#,
            ),
        ] {
            write_npy_header(&path, dict, &values);
            let message = Npy::open(&path).unwrap_err().to_string();
            assert!(
                message.contains("a.npy: descr: ")
                    && message.contains(descr)
                    && message.contains("structured"),
                "{message}"
            );
        }
        // A type fateplan does not read is quoted, either style.
        write_npy_header(
            &path,
            r#"{"descr": ">i8", "fortran_order": False, "shape": (4,), }"#,
            &values,
        );
        let message = Npy::open(&path).unwrap_err().to_string();
        assert!(
            message.contains("descr: \">i8\"; fateplan reads"),
            "{message}"
        );
    }

    pub fn write_fortran_npy(path: &Path, descr: &str, shape: &[u64], data: &[u8]) {
        write_npy(path, descr, shape, data);
        let bytes = std::fs::read(path).unwrap();
        let mut fixed = bytes.clone();
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        fixed[at..at + 5].copy_from_slice(b"True ");
        std::fs::write(path, fixed).unwrap();
    }
}
