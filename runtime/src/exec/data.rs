//! What a tensor holds while the executor runs, and its byte form for the
//! SSD tier.

use fateplan_kernels::{BlockRef, Weighting};

use crate::exec::ExecError;

/// A topology block: CSR over destination rows with local source columns,
/// and its edges' weights laid out as `weighting` says.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockData {
    pub row_start: Vec<u64>,
    pub columns: Vec<u32>,
    pub weights: Vec<f32>,
    pub weighting: Weighting,
}

impl BlockData {
    /// The kernels' view.
    pub fn view(&self) -> BlockRef<'_> {
        BlockRef {
            row_start: &self.row_start,
            columns: &self.columns,
            weights: &self.weights,
            weighting: self.weighting,
        }
    }
}

/// A tensor's contents.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I64(Vec<i64>),
    Block(BlockData),
    /// Contents a backend keeps in memory of its own (a GPU's memory, or
    /// pinned host buffers): only that backend reads them, and its
    /// [`crate::exec::Mover`] turns them into the other variants.
    Held(Held),
}

/// What a [`Data::Held`] holds: the backend's own value and its byte
/// length. Clones share the value.
#[derive(Clone)]
pub struct Held {
    bytes: u64,
    value: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

impl Held {
    pub fn new<T: std::any::Any + Send + Sync>(bytes: u64, value: T) -> Held {
        Held {
            bytes,
            value: std::sync::Arc::new(value),
        }
    }

    pub fn byte_len(&self) -> u64 {
        self.bytes
    }

    /// The value, if it is a `T`.
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.value.downcast_ref()
    }

    /// The value to change in place, if it is a `T` and no clone shares it.
    pub fn get_mut<T: std::any::Any>(&mut self) -> Option<&mut T> {
        std::sync::Arc::get_mut(&mut self.value)?.downcast_mut()
    }

    /// The value itself, if it is a `T` and no clone shares it; else the
    /// holder back, unchanged.
    pub fn take<T: std::any::Any + Send + Sync>(self) -> Result<T, Held> {
        let bytes = self.bytes;
        match self.value.downcast::<T>() {
            Ok(value) => std::sync::Arc::try_unwrap(value).map_err(|value| Held { bytes, value }),
            Err(value) => Err(Held { bytes, value }),
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({} bytes)", self.bytes)
    }
}

impl PartialEq for Held {
    /// The same value, not equal contents: held contents are not read here.
    fn eq(&self, other: &Held) -> bool {
        std::sync::Arc::ptr_eq(&self.value, &other.value)
    }
}

/// `len` zeros in a fresh buffer, or [`ExecError::OutOfMemory`] where
/// the allocator has not the memory: a tensor too large for what is left
/// ends the run with an error, not the process.
pub fn zeros<T: bytemuck::Zeroable>(len: usize) -> Result<Vec<T>, ExecError> {
    bytemuck::allocation::try_zeroed_vec(len).map_err(|()| {
        ExecError::out_of_memory((len as u64).saturating_mul(std::mem::size_of::<T>() as u64))
    })
}

/// A copy of `values` in a fresh buffer, or [`ExecError::OutOfMemory`]
/// as [`zeros`].
pub fn copied<T: Copy>(values: &[T]) -> Result<Vec<T>, ExecError> {
    let mut out = room_for(values.len())?;
    out.extend_from_slice(values);
    Ok(out)
}

/// An empty buffer with room for `len` values, or
/// [`ExecError::OutOfMemory`] as [`zeros`]: for a buffer filled as it is
/// made.
pub fn room_for<T>(len: usize) -> Result<Vec<T>, ExecError> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| {
        ExecError::out_of_memory((len as u64).saturating_mul(std::mem::size_of::<T>() as u64))
    })?;
    Ok(out)
}

/// `parts` one after another in a fresh buffer, or
/// [`ExecError::OutOfMemory`] as [`zeros`].
pub fn concatenated<T: Copy>(parts: &[&[T]]) -> Result<Vec<T>, ExecError> {
    let mut out = room_for(parts.iter().map(|p| p.len()).sum())?;
    for part in parts {
        out.extend_from_slice(part);
    }
    Ok(out)
}

impl BlockData {
    /// A copy in fresh buffers, or [`ExecError::OutOfMemory`] as [`zeros`].
    pub fn try_clone(&self) -> Result<BlockData, ExecError> {
        Ok(BlockData {
            row_start: copied(&self.row_start)?,
            columns: copied(&self.columns)?,
            weights: copied(&self.weights)?,
            weighting: self.weighting,
        })
    }
}

const TAG_F32: u8 = 1;
const TAG_I64: u8 = 2;
/// A block, by its weighting: per edge, per row, per row and column, unit.
const TAG_BLOCKS: [(u8, Weighting); 4] = [
    (3, Weighting::PerEdge),
    (4, Weighting::Row),
    (5, Weighting::RowColumn),
    (6, Weighting::Unit),
];
/// Tag byte plus up to three little-endian u64 lengths.
pub(crate) const HEADER_BYTES: usize = 1 + 3 * 8;

impl Data {
    /// A copy in fresh buffers (held contents shared, as a clone shares
    /// them), or [`ExecError::OutOfMemory`] as [`zeros`].
    pub fn try_clone(&self) -> Result<Data, ExecError> {
        Ok(match self {
            Data::F32(v) => Data::F32(copied(v)?),
            Data::I64(v) => Data::I64(copied(v)?),
            Data::Block(b) => Data::Block(b.try_clone()?),
            Data::Held(h) => Data::Held(h.clone()),
        })
    }

    /// Bytes of the contents, which the plan's tensor size must cover.
    pub fn byte_len(&self) -> u64 {
        match self {
            Data::F32(v) => v.len() as u64 * 4,
            Data::I64(v) => v.len() as u64 * 8,
            Data::Block(b) => {
                b.row_start.len() as u64 * 8
                    + b.columns.len() as u64 * 4
                    + b.weights.len() as u64 * 4
            }
            Data::Held(h) => h.byte_len(),
        }
    }

    pub fn f32(&self) -> Result<&[f32], ExecError> {
        match self {
            Data::F32(v) => Ok(v),
            other => Err(ExecError::Internal(format!(
                "expected f32 data, found {}",
                other.kind()
            ))),
        }
    }

    pub fn i64(&self) -> Result<&[i64], ExecError> {
        match self {
            Data::I64(v) => Ok(v),
            other => Err(ExecError::Internal(format!(
                "expected i64 data, found {}",
                other.kind()
            ))),
        }
    }

    pub fn block(&self) -> Result<&BlockData, ExecError> {
        match self {
            Data::Block(b) => Ok(b),
            other => Err(ExecError::Internal(format!(
                "expected a block, found {}",
                other.kind()
            ))),
        }
    }

    pub fn f32_mut(&mut self) -> Result<&mut [f32], ExecError> {
        match self {
            Data::F32(v) => Ok(v),
            other => Err(ExecError::Internal(format!(
                "expected f32 data, found {}",
                other.kind()
            ))),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Data::F32(_) => "f32",
            Data::I64(_) => "i64",
            Data::Block(_) => "block",
            Data::Held(_) => "backend-held",
        }
    }

    /// A self-describing little-endian byte form; held contents have none
    /// (a backend's [`crate::exec::Mover::to_plain`] reads them first).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ExecError> {
        let mut out = zeros(self.byte_form_len())?;
        self.write_byte_form(&mut out)?;
        Ok(out)
    }

    /// The length of [`Data::to_bytes`]'s form.
    pub fn byte_form_len(&self) -> usize {
        HEADER_BYTES + self.byte_len() as usize
    }

    /// Writes [`Data::to_bytes`]'s form into `out`, of
    /// [`Data::byte_form_len`] bytes: where the caller's buffer is the one
    /// written out (the SSD tier's aligned block), without a copy between.
    pub fn write_byte_form(&self, out: &mut [u8]) -> Result<(), ExecError> {
        if out.len() != self.byte_form_len() {
            return Err(ExecError::Internal(format!(
                "a byte form of {} bytes written into {}",
                self.byte_form_len(),
                out.len()
            )));
        }
        self.write_byte_form_part(0, out)
    }

    /// Writes the bytes of [`Data::to_bytes`]'s form from byte `from` on
    /// into all of `out`: the form a piece at a time, each piece into a
    /// staging buffer (the SSD tier's chunks).
    pub fn write_byte_form_part(&self, from: usize, out: &mut [u8]) -> Result<(), ExecError> {
        let total = self.byte_form_len();
        if from.checked_add(out.len()).is_none_or(|end| end > total) {
            return Err(ExecError::Internal(format!(
                "bytes {from}.. ({} of them) of a byte form of {total}",
                out.len()
            )));
        }
        let header = self.header()?;
        let mut start = 0;
        for run in self.sections(&header) {
            let (end, out_end) = (start + run.len(), from + out.len());
            if start < out_end && from < end {
                let first = from.max(start);
                let last = out_end.min(end);
                out[first - from..last - from].copy_from_slice(&run[first - start..last - start]);
            }
            start = end;
        }
        Ok(())
    }

    /// The tag byte and three little-endian lengths.
    fn header(&self) -> Result<[u8; HEADER_BYTES], ExecError> {
        let (tag, lengths): (u8, [u64; 3]) = match self {
            Data::F32(v) => (TAG_F32, [v.len() as u64, 0, 0]),
            Data::I64(v) => (TAG_I64, [v.len() as u64, 0, 0]),
            Data::Block(b) => (
                TAG_BLOCKS
                    .iter()
                    .find(|(_, w)| *w == b.weighting)
                    .expect("every weighting has a tag")
                    .0,
                [
                    b.row_start.len() as u64,
                    b.columns.len() as u64,
                    b.weights.len() as u64,
                ],
            ),
            Data::Held(_) => {
                return Err(ExecError::Internal(
                    "backend-held data has no byte form".into(),
                ))
            }
        };
        let mut header = [0; HEADER_BYTES];
        header[0] = tag;
        for (k, length) in lengths.iter().enumerate() {
            header[1 + 8 * k..9 + 8 * k].copy_from_slice(&length.to_le_bytes());
        }
        Ok(header)
    }

    /// The byte form's runs, in order, `header` first: each run's
    /// values' own bytes, which are their little-endian form on the
    /// targets this builds for.
    fn sections<'a>(&'a self, header: &'a [u8]) -> Vec<&'a [u8]> {
        use bytemuck::cast_slice;
        let mut sections = vec![header];
        match self {
            Data::F32(v) => sections.push(cast_slice(v)),
            Data::I64(v) => sections.push(cast_slice(v)),
            Data::Block(b) => sections.extend([
                cast_slice(&b.row_start),
                cast_slice(&b.columns),
                cast_slice(&b.weights),
            ]),
            Data::Held(_) => {}
        }
        sections
    }

    /// Reads [`Data::to_bytes`]'s form back; any inconsistency is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Data, ExecError> {
        let mut reader = FormReader::new(bytes.len());
        reader.feed(bytes)?;
        reader.finish()
    }
}

// The byte form's words are the values' own bytes, little-endian.
#[cfg(not(target_endian = "little"))]
compile_error!("the SSD tier's byte form is little-endian");

/// Reads a byte form of a known length in pieces as they arrive (the SSD
/// tier's chunks), into the tensor's own buffers: the form is never whole
/// in memory. [`Data::from_bytes`] is one piece.
pub struct FormReader {
    total: usize,
    seen: usize,
    header: Vec<u8>,
    /// After the header: the runs, each made whole (zeros) when the
    /// header came, filled in order a byte at a time.
    sinks: Vec<Sink>,
    /// Which of `sinks` the next bytes go to.
    sink: usize,
    /// Bytes of that run filled.
    filled: usize,
    tag: u8,
    weighting: Option<Weighting>,
}

/// A run of words being read, as long as the header says.
enum Sink {
    F32(Vec<f32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    U32(Vec<u32>),
}

impl Sink {
    /// The run's words as bytes, to be filled (in the form's order, as
    /// the words are little-endian here).
    fn bytes_mut(&mut self) -> &mut [u8] {
        use bytemuck::cast_slice_mut;
        match self {
            Sink::F32(v) => cast_slice_mut(v),
            Sink::I64(v) => cast_slice_mut(v),
            Sink::U64(v) => cast_slice_mut(v),
            Sink::U32(v) => cast_slice_mut(v),
        }
    }
}

impl FormReader {
    /// A reader of a form of `total` bytes.
    pub fn new(total: usize) -> FormReader {
        FormReader {
            total,
            seen: 0,
            header: Vec::with_capacity(HEADER_BYTES),
            sinks: Vec::new(),
            sink: 0,
            filled: 0,
            tag: 0,
            weighting: None,
        }
    }

    fn bad(why: &str) -> ExecError {
        ExecError::Internal(format!("spilled tensor bytes: {why}"))
    }

    /// Takes the form's next bytes.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), ExecError> {
        if self.seen + bytes.len() > self.total {
            return Err(FormReader::bad(&format!(
                "more than the {} bytes announced",
                self.total
            )));
        }
        self.seen += bytes.len();
        if self.header.len() < HEADER_BYTES {
            let take = (HEADER_BYTES - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.header.len() < HEADER_BYTES {
                return Ok(());
            }
            self.start()?;
        }
        while !bytes.is_empty() {
            let Some(sink) = self.sinks.get_mut(self.sink) else {
                return Err(FormReader::bad("bytes past the body"));
            };
            let run = &mut sink.bytes_mut()[self.filled..];
            let here = run.len().min(bytes.len());
            run[..here].copy_from_slice(&bytes[..here]);
            bytes = &bytes[here..];
            self.filled += here;
            self.skip_filled();
        }
        Ok(())
    }

    /// Checks the header against the form's length and makes room for
    /// the body.
    fn start(&mut self) -> Result<(), ExecError> {
        let bad = FormReader::bad;
        let header = &self.header;
        let length = |k: usize| {
            u64::from_le_bytes(header[1 + 8 * k..9 + 8 * k].try_into().expect("8 bytes")) as usize
        };
        let (a, b, c) = (length(0), length(1), length(2));
        let body = self.total - HEADER_BYTES;
        self.tag = header[0];
        self.weighting = TAG_BLOCKS
            .iter()
            .find(|(tag, _)| *tag == self.tag)
            .map(|(_, w)| *w);
        // The weights a layout holds (a source row's scales are at least
        // none: the source rows are not recorded).
        let rows = a.saturating_sub(1);
        let weights_fit = match self.weighting {
            Some(Weighting::PerEdge) => c == b,
            Some(Weighting::Row) => c == rows,
            Some(Weighting::RowColumn) => c >= rows,
            Some(Weighting::Unit) => c == 0,
            None => true,
        };
        if !weights_fit {
            return Err(bad(&format!(
                "{c} weights do not fit a {:?} block of {rows} rows and {b} edges",
                self.weighting
            )));
        }
        let expected = match (self.tag, self.weighting) {
            (TAG_F32, _) => a.checked_mul(4),
            (TAG_I64, _) => a.checked_mul(8),
            (_, Some(_)) => a
                .checked_mul(8)
                .and_then(|x| x.checked_add(b.checked_mul(4)?))
                .and_then(|x| x.checked_add(c.checked_mul(4)?)),
            (tag, None) => return Err(bad(&format!("unknown tag {tag}"))),
        };
        if expected != Some(body) {
            return Err(bad(&format!("{body} body bytes do not match the header")));
        }
        // Zeroed (by fresh pages where the allocator maps new memory),
        // then filled by the pieces' copies.
        self.sinks = match self.tag {
            TAG_F32 => vec![Sink::F32(zeros(a)?)],
            TAG_I64 => vec![Sink::I64(zeros(a)?)],
            _ => vec![
                Sink::U64(zeros(a)?),
                Sink::U32(zeros(b)?),
                Sink::F32(zeros(c)?),
            ],
        };
        self.skip_filled();
        Ok(())
    }

    /// Moves past the runs that hold all their bytes (runs of none
    /// before they start).
    fn skip_filled(&mut self) {
        while let Some(sink) = self.sinks.get_mut(self.sink) {
            if self.filled < sink.bytes_mut().len() {
                return;
            }
            self.sink += 1;
            self.filled = 0;
        }
    }

    /// The tensor, once every announced byte came.
    pub fn finish(self) -> Result<Data, ExecError> {
        if self.header.len() < HEADER_BYTES {
            return Err(FormReader::bad("shorter than the header"));
        }
        if self.seen != self.total || self.sink < self.sinks.len() {
            return Err(FormReader::bad(&format!(
                "{} of {} bytes came",
                self.seen, self.total
            )));
        }
        let mut sinks = self.sinks.into_iter();
        let mut next = || sinks.next();
        Ok(match (next(), self.weighting) {
            (Some(Sink::F32(v)), None) => Data::F32(v),
            (Some(Sink::I64(v)), None) => Data::I64(v),
            (Some(Sink::U64(row_start)), Some(weighting)) => match (next(), next()) {
                (Some(Sink::U32(columns)), Some(Sink::F32(weights))) => Data::Block(BlockData {
                    row_start,
                    columns,
                    weights,
                    weighting,
                }),
                _ => return Err(ExecError::Internal("a block's runs out of order".into())),
            },
            _ => {
                return Err(ExecError::Internal(
                    "a byte form's runs out of order".into(),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_value_is_taken_only_as_its_type_and_when_unshared() {
        let held = Held::new(8, vec![1u32, 2]);
        let held = held.take::<String>().expect_err("not a String");
        assert_eq!(held.byte_len(), 8);
        let shared = held.value.clone();
        let held = held.take::<Vec<u32>>().expect_err("a clone shares it");
        drop(shared);
        assert_eq!(held.take::<Vec<u32>>().expect("unshared"), vec![1, 2]);
    }

    /// Every kind of tensor the byte form holds, empty ones too.
    fn samples() -> Vec<Data> {
        vec![
            Data::F32(vec![1.5, -0.0, f32::MIN_POSITIVE]),
            Data::I64(vec![-3, 7]),
            Data::Block(BlockData {
                row_start: vec![0, 1, 3],
                columns: vec![2, 0, 1],
                weights: vec![0.5, 0.25, 1.0],
                weighting: Weighting::PerEdge,
            }),
            Data::Block(BlockData {
                row_start: vec![0, 1, 3],
                columns: vec![2, 0, 1],
                weights: vec![0.5, 0.25, 1.0, 2.0, 4.0],
                weighting: Weighting::RowColumn,
            }),
            Data::Block(BlockData {
                row_start: vec![0, 0],
                columns: vec![],
                weights: vec![],
                weighting: Weighting::Unit,
            }),
            Data::F32(vec![]),
        ]
    }

    #[test]
    fn byte_form_round_trips_and_rejects_damage() {
        for data in samples() {
            let bytes = data.to_bytes().unwrap();
            assert_eq!(Data::from_bytes(&bytes).unwrap(), data);
            assert!(Data::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        }
        assert!(Data::from_bytes(&[9; HEADER_BYTES]).is_err());
        // A per-edge block read as unit or per-row weights has too many.
        let per_edge = Data::Block(BlockData {
            row_start: vec![0, 1, 3],
            columns: vec![2, 0, 1],
            weights: vec![0.5, 0.25, 1.0],
            weighting: Weighting::PerEdge,
        });
        let mut bytes = per_edge.to_bytes().unwrap();
        for tag in [4, 6] {
            bytes[0] = tag;
            let e = Data::from_bytes(&bytes).unwrap_err().to_string();
            assert!(e.contains("3 weights do not fit"), "{e}");
        }
        assert!(Data::Held(Held::new(4, 1u8)).to_bytes().is_err());
    }

    /// The form written and read a piece at a time, cut anywhere (in the
    /// header, inside a word), is the form whole; a reader given a byte
    /// too few or too many fails.
    #[test]
    fn byte_form_in_pieces_is_the_form_whole() {
        // Runs of several words each, of both word sizes, so that pieces
        // cross from one run into the next with a word cut.
        let rows = 40;
        let larger = Data::Block(BlockData {
            row_start: (0..=rows as u64).map(|r| r * 3).collect(),
            columns: (0..3 * rows as u32).map(|c| c * 7 % 11).collect(),
            weights: (0..3 * rows).map(|w| w as f32 * 0.25 - 3.0).collect(),
            weighting: Weighting::PerEdge,
        });
        let mut cases = samples();
        cases.push(larger);
        for data in cases {
            let whole = data.to_bytes().unwrap();
            let pieces = (1..=41).chain([64, 4063, 4096, whole.len()]);
            for piece in pieces.filter(|&p| p <= whole.len()) {
                let mut written = vec![0xa5; whole.len()];
                for (k, out) in written.chunks_mut(piece).enumerate() {
                    data.write_byte_form_part(k * piece, out).unwrap();
                }
                assert_eq!(written, whole, "pieces of {piece}");
                let mut reader = FormReader::new(whole.len());
                for part in whole.chunks(piece) {
                    reader.feed(part).unwrap();
                }
                assert_eq!(reader.finish().unwrap(), data, "pieces of {piece}");
            }
            let mut short = FormReader::new(whole.len());
            short.feed(&whole[..whole.len() - 1]).unwrap();
            let e = short.finish().unwrap_err().to_string();
            assert!(
                e.contains("bytes came") || e.contains("shorter than the header"),
                "{e}"
            );
            let mut long = FormReader::new(whole.len());
            long.feed(&whole).unwrap();
            assert!(long.feed(&[0]).is_err());
            assert!(data
                .write_byte_form_part(whole.len() - 1, &mut [0, 0])
                .is_err());
        }
    }

    /// A buffer larger than the allocator gives is an error of its bytes,
    /// never an abort; the copies hold what they copy.
    #[test]
    fn buffers_the_allocator_cannot_give_are_errors() {
        let error = zeros::<f32>(1 << 61).unwrap_err();
        assert!(
            matches!(error, ExecError::OutOfMemory { bytes, during: None } if bytes == 1 << 63),
            "{error:?}"
        );
        let error = zeros::<u64>(usize::MAX).unwrap_err();
        assert!(
            matches!(error, ExecError::OutOfMemory { bytes, .. } if bytes == u64::MAX),
            "{error:?}"
        );
        assert_eq!(zeros::<i64>(3).unwrap(), vec![0, 0, 0]);
        assert_eq!(copied(&[1.5f32, -2.0]).unwrap(), vec![1.5, -2.0]);
        assert_eq!(
            concatenated(&[&[1u32, 2][..], &[], &[3]]).unwrap(),
            vec![1, 2, 3]
        );
        let block = Data::Block(BlockData {
            row_start: vec![0, 1, 3],
            columns: vec![2, 0, 1],
            weights: vec![0.5, 0.25, 0.25],
            weighting: Weighting::PerEdge,
        });
        for data in [Data::F32(vec![1.0, 2.0]), Data::I64(vec![-4]), block] {
            assert_eq!(data.try_clone().unwrap(), data);
        }
    }
}
