//! Page-aligned, zero-initialised byte buffers for O_DIRECT I/O.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer, file offset and request length the spill
/// store hands to the kernel: 4096 satisfies O_DIRECT on every common
/// file system and device.
pub const ALIGN_BYTES: usize = 4096;

/// `bytes` rounded up to a multiple of [`ALIGN_BYTES`], or `None` on overflow.
pub(crate) fn round_up(bytes: u64) -> Option<u64> {
    let align = ALIGN_BYTES as u64;
    Some(bytes.checked_add(align - 1)? / align * align)
}

/// A type with the buffers' alignment, for the dangling pointer of an
/// empty buffer.
#[repr(align(4096))]
struct Page;

const _: () = assert!(std::mem::align_of::<Page>() == ALIGN_BYTES);

/// A heap buffer whose start and capacity are multiples of [`ALIGN_BYTES`]:
/// what O_DIRECT reads and writes need. Its memory is zeroed when
/// allocated, so the padding past [`len`](Self::len) never carries stale
/// bytes to disk.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    capacity: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer holding `len_bytes` bytes, with capacity rounded up
    /// to [`ALIGN_BYTES`]. Fails (rather than aborting) when the size is
    /// absurd or the allocator is out of memory.
    pub fn zeroed(len_bytes: usize) -> std::io::Result<AlignedBuf> {
        let capacity = round_up(len_bytes as u64)
            .and_then(|c| usize::try_from(c).ok())
            .ok_or_else(|| too_large(len_bytes))?;
        if capacity == 0 {
            return Ok(AlignedBuf {
                // An aligned dangling pointer: valid for zero-length slices.
                ptr: NonNull::<Page>::dangling().cast(),
                capacity: 0,
                len: 0,
            });
        }
        let layout =
            Layout::from_size_align(capacity, ALIGN_BYTES).map_err(|_| too_large(len_bytes))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate an aligned buffer of {capacity} bytes"),
            )
        })?;
        Ok(AlignedBuf {
            ptr,
            capacity,
            len: len_bytes,
        })
    }

    /// An aligned copy of `data`.
    pub fn from_slice(data: &[u8]) -> std::io::Result<AlignedBuf> {
        let mut buf = AlignedBuf::zeroed(data.len())?;
        buf.as_mut_slice().copy_from_slice(data);
        Ok(buf)
    }

    /// Bytes in use (the block's length).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allocated bytes: [`len`](Self::len) rounded up to [`ALIGN_BYTES`]
    /// or more.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the length; fails when it exceeds the capacity. Bytes that
    /// become visible are whatever the buffer held (zero if never written).
    pub fn set_len(&mut self, len_bytes: usize) -> std::io::Result<()> {
        if len_bytes > self.capacity {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "length {len_bytes} exceeds the buffer's capacity of {} bytes",
                    self.capacity
                ),
            ));
        }
        self.len = len_bytes;
        Ok(())
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `capacity` initialised bytes and len <= capacity.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Zeroes the bytes from [`len`](Self::len) to the next multiple of
    /// [`ALIGN_BYTES`]: what a write of a reused buffer carries to disk
    /// past the block's bytes.
    pub fn clear_past_len(&mut self) {
        let end = round_up(self.len as u64).map_or(self.capacity, |e| e as usize);
        let end = end.min(self.capacity);
        // SAFETY: ptr is valid for `capacity` bytes, len <= end <= capacity,
        // and `&mut self` gives exclusive access.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, end - self.len) }
    }

    /// Start of the allocation, for the kernel.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

fn too_large(len_bytes: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("an aligned buffer of {len_bytes} bytes is too large"),
    )
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.capacity > 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe {
                alloc::dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.capacity, ALIGN_BYTES),
                )
            }
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_capacity_and_zeroing() {
        for len in [0usize, 1, 4095, 4096, 4097, 3 << 20] {
            let buf = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(buf.as_slice().as_ptr() as usize % ALIGN_BYTES, 0);
            assert_eq!(buf.capacity() % ALIGN_BYTES, 0);
            assert!(buf.capacity() >= len && buf.capacity() < len + ALIGN_BYTES);
            assert!(buf.iter().all(|&b| b == 0));
        }
        let mut buf = AlignedBuf::from_slice(b"abc").unwrap();
        assert_eq!(&buf[..], b"abc");
        assert!(buf.set_len(ALIGN_BYTES + 1).is_err());
        buf.set_len(5).unwrap();
        assert_eq!(&buf[..], b"abc\0\0");
        assert!(AlignedBuf::zeroed(usize::MAX).is_err());
    }
}
