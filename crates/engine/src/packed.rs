//! The packed layout of a [`Hold`]: the only `unsafe` of the engine, all of it here.
//!
//! Invariants every `unsafe` block below relies on:
//! - A `Hold` is a `#[repr(transparent)]` wrapper of `[u8]`, so a `Box<[u8]>` and a `Box<Hold>`
//!   have the same layout and the same (fat) pointer metadata.
//! - Its bytes are `[header: u64 LE][count: u32 LE][granted_at: i64 LE, only if the header's
//!   grant flags (bits 61 and 62) are both clear][owner]`, where the header's bits 53 to 60 hold
//!   `owner length - 1` (owners are 1 to 256 bytes), so the length of the allocation can be read
//!   back from its first 8 bytes. That is what lets Redis keep a hold behind a thin `void *`
//!   ([`Hold::into_raw`]) and the host turn it back into a `Hold` ([`Hold::borrow_raw`]).
//! - No function here makes a `Hold` of any other length.
//! - A shared key's value is a [`SharedCell`]: `#[repr(C)]`, its first field a `u64` with the top
//!   bit set, which no hold's header has (a header uses bits 0 to 62). So the first 8 bytes
//!   behind a value pointer tell which of the two it is ([`LockValue::borrow_raw`]).

use super::shared::Shared;
use super::tokens::{FLOOR_PER_MS, MAX_TOKEN as TOKEN_MASK, TOKEN_BITS};

/// The highest reentrancy count; one more `LOCK.REENTER` is refused.
pub use relock_protocol::bounds::MAX_COUNT;

/// Bytes of a hold beyond its owner when the header says what its grant time is: a header word
/// (token, owner length, grant flags) and the count.
const SHORT_BYTES: usize = 12;
/// Bytes of a hold beyond its owner that spells its grant time out (8 more bytes).
const LONG_BYTES: usize = 20;

/// Header flag: the hold was granted in the millisecond its token's clock floor names
/// (`granted_at == token / FLOOR_PER_MS`, what every grant on a server whose counter follows its
/// clock gets): no grant time is stored.
const GRANT_IN_TOKEN: u64 = 1 << 61;
/// Header flag: the grant time is unknown (0: loaded from an older encoding): none is stored.
const GRANT_UNKNOWN: u64 = 1 << 62;

/// A lock held by one owner: who, with which fencing token, how many times (reentrancy), since
/// when.
///
/// One allocation, `[token | (owner_len - 1) << 53 | grant flags : u64][count : u32][owner]`,
/// so a lock with a 36-byte UUID owner costs 48 bytes of heap beyond Redis's own key overhead
/// (jemalloc's 48-byte class), and a pointer to it is thin (Redis stores one `void *` per
/// value). Tokens are below 2^53 and owners 1 to 256 bytes long, which is what lets both share
/// the header word. The grant time costs nothing when the token says it (a token is issued at
/// or above `FLOOR_PER_MS` times the grant's millisecond, and a server issues fewer than that
/// per millisecond: [`GRANT_IN_TOKEN`]) or is unknown ([`GRANT_UNKNOWN`]); any other grant time
/// (a token issued ahead of the clock, a hold replicated from a master whose clock differs) is
/// spelled out as `[granted_at : i64]` between the count and the owner.
#[repr(transparent)]
#[derive(PartialEq, Eq)]
pub struct Hold {
    bytes: [u8],
}

/// Bytes before the owner of a hold whose header is `header`.
fn fixed_bytes(header: u64) -> usize {
    if header & (GRANT_IN_TOKEN | GRANT_UNKNOWN) != 0 {
        SHORT_BYTES
    } else {
        LONG_BYTES
    }
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
        let token = token & TOKEN_MASK;
        let flags = if granted_at == 0 {
            GRANT_UNKNOWN
        } else if granted_at > 0 && token / FLOOR_PER_MS == granted_at as u64 {
            GRANT_IN_TOKEN
        } else {
            0
        };
        let header = token | ((owner.len() as u64 - 1) << TOKEN_BITS) | flags;
        let mut bytes = Vec::with_capacity(fixed_bytes(header) + owner.len());
        bytes.extend_from_slice(&header.to_le_bytes());
        bytes.extend_from_slice(&count.to_le_bytes());
        if flags == 0 {
            bytes.extend_from_slice(&granted_at.to_le_bytes());
        }
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
        &self.bytes[fixed_bytes(self.header())..]
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
        let header = self.header();
        if header & GRANT_UNKNOWN != 0 {
            return 0;
        }
        if header & GRANT_IN_TOKEN != 0 {
            // Below 2^53 / 1000: fits.
            return ((header & TOKEN_MASK) / FLOOR_PER_MS) as i64;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[SHORT_BYTES..LONG_BYTES]);
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
        // SAFETY: the first 8 bytes are the header; the allocation is `fixed_bytes(header)` +
        // owner_len (see `Hold::new`).
        unsafe {
            let mut header = [0u8; 8];
            std::ptr::copy_nonoverlapping(ptr, header.as_mut_ptr(), 8);
            let header = u64::from_le_bytes(header);
            let owner_len = ((header >> TOKEN_BITS) & 0xff) as usize + 1;
            let slice = std::ptr::slice_from_raw_parts_mut(ptr, fixed_bytes(header) + owner_len);
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

/// A lock value as Redis stores it, behind one thin pointer. (The unit tests' `Shared` carries
/// their checking state too, which makes the variants' sizes differ past clippy's bound there.)
#[derive(Debug)]
#[cfg_attr(test, allow(clippy::large_enum_variant))]
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

    #[test]
    fn a_grant_time_the_token_says_costs_no_bytes() {
        // What a grant does: the token is issued at or above 1000 x the grant's ms.
        let now = 1_795_262_129_362_i64;
        let token = now as u64 * FLOOR_PER_MS + 17;
        let owner = [b'u'; 36];
        for (granted_at, bytes) in [(now, 12), (0, 12), (now - 1, 20), (now + 1, 20), (-5, 20)] {
            let hold = Hold::new(&owner, token, 1, granted_at);
            assert_eq!(hold.heap_size(), bytes + 36, "granted at {granted_at}");
            assert_eq!(
                (hold.owner(), hold.token(), hold.count(), hold.granted_at()),
                (&owner[..], token, 1, granted_at)
            );
            // A 36-byte owner's hold fits jemalloc's 48-byte class, as before grant times.
            let raw = Hold::into_raw(hold);
            // SAFETY: just made by `into_raw`, not aliased.
            let borrowed = unsafe { Hold::borrow_raw(raw) };
            borrowed.set_count(9);
            assert_eq!(borrowed.heap_size(), bytes + 36);
            assert_eq!((borrowed.owner(), borrowed.count()), (&owner[..], 9));
            // SAFETY: given back once.
            let back = unsafe { Hold::from_raw(raw) };
            assert_eq!(*back, *Hold::new(&owner, token, 9, granted_at));
            assert_eq!(back.to_boxed().granted_at(), granted_at);
        }
    }

    #[test]
    fn a_value_s_first_word_never_looks_shared() {
        let hold = Hold::new(&[0xff; 256], MAX_TOKEN_FOR_TEST, 1, 0);
        let raw = Hold::into_raw(hold);
        // SAFETY: `raw` points to the hold's bytes, at least 8.
        assert_eq!(unsafe { first_word(raw) } & SHARED_MARKER, 0);
        // SAFETY: just made by `into_raw`, given back once.
        let value = unsafe { LockValue::from_raw(raw) };
        assert!(matches!(value, LockValue::Exclusive(h) if h.owner() == [0xff; 256]));
    }

    const MAX_TOKEN_FOR_TEST: u64 = crate::MAX_TOKEN;
}
