//! The packed layout of a [`Hold`]: the only `unsafe` of the engine, all of it here.
//!
//! Invariants every `unsafe` block below relies on:
//! - A `Hold` is a `#[repr(transparent)]` wrapper of `[u8]`, so a `Box<[u8]>` and a `Box<Hold>`
//!   have the same layout and the same (fat) pointer metadata.
//! - Its bytes are `[header: u64 LE][count: u32 LE][owner]`, where the header's top 11 bits hold
//!   `owner length - 1` (owners are 1 to 256 bytes), so the length of the allocation can be read
//!   back from its first 8 bytes. That is what lets Redis keep a hold behind a thin `void *`
//!   ([`Hold::into_raw`]) and the host turn it back into a `Hold` ([`Hold::borrow_raw`]).
//! - No function here makes a `Hold` of any other length.
//! - A shared key's value is a [`SharedCell`]: `#[repr(C)]`, its first field a `u64` with the top
//!   bit set, which no hold's header has (a header uses bits 0 to 60). So the first 8 bytes
//!   behind a value pointer tell which of the two it is ([`LockValue::borrow_raw`]).

use super::shared::Shared;
use super::tokens::{MAX_TOKEN as TOKEN_MASK, TOKEN_BITS};

/// The highest reentrancy count; one more `LOCK.REENTER` is refused.
pub const MAX_COUNT: u32 = u32::MAX;

/// Bytes of a hold beyond its owner: a header word (token and owner length), the count and the
/// grant time.
const FIXED_BYTES: usize = 20;

/// A lock held by one owner: who, with which fencing token, how many times (reentrancy).
///
/// One allocation, `[token | (owner_len - 1) << 53 : u64][count : u32][granted_at : i64][owner]`,
/// so a lock with a 36-byte UUID owner costs 56 bytes of heap beyond Redis's own key overhead, and a
/// pointer to it is thin (Redis stores one `void *` per value). Tokens are below 2^53 and
/// owners 1 to 256 bytes long, which is what lets both share the header word.
#[repr(transparent)]
#[derive(PartialEq, Eq)]
pub struct Hold {
    bytes: [u8],
}

impl Hold {
    /// A hold of `owner` (1 to 256 bytes) with `token` (below 2^53) and `count`, granted at
    /// `granted_at` (Unix ms; 0 if unknown).
    pub fn new(owner: &[u8], token: u64, count: u32, granted_at: i64) -> Box<Hold> {
        debug_assert!((1..=256).contains(&owner.len()) && token <= TOKEN_MASK);
        // Callers validate owners (1 to 256 bytes); outside that, degrade instead of panicking,
        // since this runs inside Redis.
        let owner: &[u8] = match owner.len() {
            0 => b"?",
            n => &owner[..n.min(256)],
        };
        let header = (token & TOKEN_MASK) | ((owner.len() as u64 - 1) << TOKEN_BITS);
        let mut bytes = Vec::with_capacity(FIXED_BYTES + owner.len());
        bytes.extend_from_slice(&header.to_le_bytes());
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&granted_at.to_le_bytes());
        bytes.extend_from_slice(owner);
        let raw = Box::into_raw(bytes.into_boxed_slice()) as *mut Hold;
        // SAFETY: Hold is a transparent wrapper around [u8].
        unsafe { Box::from_raw(raw) }
    }

    fn header(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[0..8]);
        u64::from_le_bytes(b)
    }

    /// The owner: an opaque, binary-safe client-chosen string.
    pub fn owner(&self) -> &[u8] {
        &self.bytes[FIXED_BYTES..]
    }

    /// The fencing token of this hold.
    pub fn token(&self) -> u64 {
        self.header() & TOKEN_MASK
    }

    /// The reentrancy count, at least 1.
    pub fn count(&self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes[8..12]);
        u32::from_le_bytes(b)
    }

    /// When the hold was granted (Unix ms), 0 if unknown (loaded from an older RDB encoding).
    pub fn granted_at(&self) -> i64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[12..20]);
        i64::from_le_bytes(b)
    }

    /// Changes the reentrancy count (the caller keeps it >= 1).
    pub fn set_count(&mut self, count: u32) {
        self.bytes[8..12].copy_from_slice(&count.to_le_bytes());
    }

    /// Heap bytes of this hold (for `MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        self.bytes.len()
    }

    /// Whether `owner` holds this lock.
    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        // The first owner byte sits next to the header, which the caller has just read; a
        // 36-byte owner ends on the next cache line, which a refusal rarely needs to touch.
        let mine = self.owner();
        mine.len() == owner.len() && mine.first() == owner.first() && mine == owner
    }

    /// An owned copy.
    pub fn to_boxed(&self) -> Box<Hold> {
        Hold::new(self.owner(), self.token(), self.count(), self.granted_at())
    }

    /// Gives up ownership as a thin pointer (what Redis stores as a value).
    pub fn into_raw(hold: Box<Hold>) -> *mut u8 {
        Box::into_raw(hold).cast::<u8>()
    }

    /// Borrows the hold behind a pointer from [`Hold::into_raw`].
    ///
    /// # Safety
    /// `ptr` must come from `into_raw`, not yet passed to `from_raw`, and not be aliased
    /// mutably for `'a`.
    pub unsafe fn borrow_raw<'a>(ptr: *mut u8) -> &'a mut Hold {
        // SAFETY: the first 8 bytes are the header; the allocation is FIXED_BYTES + owner_len.
        unsafe {
            let mut header = [0u8; 8];
            std::ptr::copy_nonoverlapping(ptr, header.as_mut_ptr(), 8);
            let owner_len = (u64::from_le_bytes(header) >> TOKEN_BITS) as usize + 1;
            let slice = std::ptr::slice_from_raw_parts_mut(ptr, FIXED_BYTES + owner_len);
            &mut *(slice as *mut Hold)
        }
    }

    /// Takes back ownership of a pointer from [`Hold::into_raw`].
    ///
    /// # Safety
    /// As for [`Hold::borrow_raw`]; the pointer must not be used afterwards.
    pub unsafe fn from_raw(ptr: *mut u8) -> Box<Hold> {
        // SAFETY: the caller's promise: `ptr` is the box `into_raw` leaked, given back once.
        unsafe { Box::from_raw(Hold::borrow_raw(ptr) as *mut Hold) }
    }
}

/// The top bit of a value's first word: set for a shared key's value, clear for a hold.
const SHARED_MARKER: u64 = 1 << 63;

/// A shared key's value as Redis stores it: a marker word first, so that it can be told apart
/// from a packed hold behind the same thin pointer.
#[repr(C)]
struct SharedCell {
    /// `SHARED_MARKER` as little-endian bytes, as a hold's header is stored.
    marker: [u8; 8],
    shared: Shared,
}

/// A lock value as Redis stores it, behind one thin pointer.
#[derive(Debug)]
pub enum LockValue {
    Exclusive(Box<Hold>),
    Shared(Shared),
}

/// A borrowed lock value.
#[derive(Clone, Copy, Debug)]
pub enum LockRef<'a> {
    Exclusive(&'a Hold),
    Shared(&'a Shared),
}

/// A mutably borrowed lock value.
#[derive(Debug)]
pub enum LockMut<'a> {
    Exclusive(&'a mut Hold),
    Shared(&'a mut Shared),
}

impl LockMut<'_> {
    /// A shared borrow of the same value.
    pub fn as_ref(&self) -> LockRef<'_> {
        match self {
            LockMut::Exclusive(hold) => LockRef::Exclusive(hold),
            LockMut::Shared(shared) => LockRef::Shared(shared),
        }
    }
}

impl LockValue {
    /// Gives up ownership as a thin pointer (what Redis stores as a value).
    pub fn into_raw(self) -> *mut u8 {
        match self {
            LockValue::Exclusive(hold) => Hold::into_raw(hold),
            LockValue::Shared(shared) => Box::into_raw(Box::new(SharedCell {
                marker: SHARED_MARKER.to_le_bytes(),
                shared,
            }))
            .cast::<u8>(),
        }
    }

    /// Borrows the value behind a pointer from [`LockValue::into_raw`].
    ///
    /// # Safety
    /// `ptr` must come from `into_raw`, not yet passed to `from_raw`, and not be aliased
    /// mutably for `'a`.
    pub unsafe fn borrow_raw<'a>(ptr: *mut u8) -> LockMut<'a> {
        // SAFETY: both kinds of value start with 8 readable bytes (see the module's invariants).
        let first = unsafe { first_word(ptr) };
        if first & SHARED_MARKER != 0 {
            // SAFETY: the marker says this is a `SharedCell` made by `into_raw`.
            LockMut::Shared(unsafe { &mut (*ptr.cast::<SharedCell>()).shared })
        } else {
            // SAFETY: no marker: a hold made by `Hold::into_raw`.
            LockMut::Exclusive(unsafe { Hold::borrow_raw(ptr) })
        }
    }

    /// Takes back ownership of a pointer from [`LockValue::into_raw`].
    ///
    /// # Safety
    /// As for [`LockValue::borrow_raw`]; the pointer must not be used afterwards.
    pub unsafe fn from_raw(ptr: *mut u8) -> LockValue {
        // SAFETY: as in `borrow_raw`.
        let first = unsafe { first_word(ptr) };
        if first & SHARED_MARKER != 0 {
            // SAFETY: a `SharedCell` boxed by `into_raw`, given back exactly once.
            let cell = unsafe { Box::from_raw(ptr.cast::<SharedCell>()) };
            LockValue::Shared(cell.shared)
        } else {
            // SAFETY: a hold boxed by `Hold::into_raw`, given back exactly once.
            LockValue::Exclusive(unsafe { Hold::from_raw(ptr) })
        }
    }
}

/// The first 8 bytes behind `ptr`, read unaligned (a hold's bytes have alignment 1).
///
/// # Safety
/// `ptr` must point to at least 8 readable bytes.
unsafe fn first_word(ptr: *const u8) -> u64 {
    let mut word = [0u8; 8];
    // SAFETY: the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(ptr, word.as_mut_ptr(), 8) };
    u64::from_le_bytes(word)
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("owner", &String::from_utf8_lossy(self.owner()))
            .field("token", &self.token())
            .field("count", &self.count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_fields() {
        let text = format!("{:?}", Hold::new(b"me", 42, 3, 0));
        assert_eq!(text, r#"Hold { owner: "me", token: 42, count: 3 }"#);
    }

    #[test]
    fn hold_round_trips_its_fields() {
        let owner = b"\x00binary\xffowner";
        let mut hold = Hold::new(owner, MAX_TOKEN_FOR_TEST, 7, 1_800_000_000_000);
        assert_eq!(hold.owner(), owner);
        assert_eq!(hold.granted_at(), 1_800_000_000_000);
        assert_eq!(hold.token(), MAX_TOKEN_FOR_TEST);
        assert_eq!(hold.count(), 7);
        hold.set_count(MAX_COUNT);
        assert_eq!(hold.count(), MAX_COUNT);
        assert_eq!(hold.token(), MAX_TOKEN_FOR_TEST);
        assert_eq!(hold.granted_at(), 1_800_000_000_000);
        assert_eq!(hold.heap_size(), 20 + owner.len());
    }

    #[test]
    fn raw_round_trip_keeps_every_owner_length() {
        for len in [1usize, 36, 255, 256] {
            let owner = vec![0xabu8; len];
            let raw = Hold::into_raw(Hold::new(&owner, MAX_TOKEN_FOR_TEST, 3, 0));
            // SAFETY: `raw` was just made by `into_raw` and is not aliased.
            let borrowed = unsafe { Hold::borrow_raw(raw) };
            assert_eq!(
                (borrowed.owner().len(), borrowed.token(), borrowed.count()),
                (len, MAX_TOKEN_FOR_TEST, 3)
            );
            borrowed.set_count(4);
            // SAFETY: given back once, and not used after.
            let back = unsafe { Hold::from_raw(raw) };
            assert_eq!(*back, *Hold::new(&owner, MAX_TOKEN_FOR_TEST, 4, 0));
        }
    }

    const MAX_TOKEN_FOR_TEST: u64 = crate::lock::MAX_TOKEN;
}
