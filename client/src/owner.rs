//! Owners people can read: `<host>/<pid>/<32 hex random>`, so that `LOCK.INFO`, `LOCK.HOLDERS`,
//! `LOCK.WAITERS` and `LOCK.LOG` say which process holds or waits.

/// The longest owner the module accepts.
pub const MAX_OWNER: usize = 256;
/// The random part: 128 bits as 32 hex digits.
const RANDOM_HEX: usize = 32;

/// A fresh owner: `<prefix>/<32 hex random>`, where the prefix is `<host>/<pid>` when `prefix`
/// is `None`, the given text otherwise, and an empty prefix gives the random part alone.
///
/// The random part (128 bits) keeps two holders from ever sharing an owner; the prefix is cut
/// (at a character boundary) so that the whole fits the module's 256 bytes, never the random
/// part.
pub fn make_owner(prefix: Option<&str>) -> String {
    let random = format!("{:032x}", u128::from_be_bytes(random_bytes()));
    let prefix = match prefix {
        Some(p) => p.to_string(),
        None => host_pid(),
    };
    with_prefix(&prefix, &random)
}

fn with_prefix(prefix: &str, random: &str) -> String {
    if prefix.is_empty() {
        return random.to_string();
    }
    let room = MAX_OWNER - RANDOM_HEX - 1;
    let mut cut = prefix.len().min(room);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}/{random}", &prefix[..cut])
}

/// 16 bytes from the kernel's random source (uniqueness across processes and hosts is the
/// point, so not a seeded generator); a UUID v4's bytes if that fails.
fn random_bytes() -> [u8; 16] {
    let mut buf = [0u8; 16];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`, which lives for the call.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        buf
    } else {
        *uuid::Uuid::new_v4().as_bytes()
    }
}

/// `<host>/<pid>` of this process, asked each time (a forked child has its own pid).
fn host_pid() -> String {
    format!("{}/{}", host_name(), std::process::id())
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`, which lives for the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".to_string();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    if name.is_empty() {
        "unknown-host".to_string()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_part(owner: &str) -> &str {
        owner.rsplit('/').next().expect("a random part")
    }

    #[test]
    fn the_default_names_host_and_pid() {
        let owner = make_owner(None);
        let parts: Vec<&str> = owner.rsplitn(3, '/').collect();
        assert_eq!(parts.len(), 3, "{owner}");
        assert_eq!(parts[1], std::process::id().to_string());
        assert_eq!(parts[2], host_name());
        assert_eq!(parts[0].len(), 32);
        assert!(parts[0].chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(make_owner(None), owner, "fresh every time");
    }

    #[test]
    fn a_prefix_replaces_host_and_pid() {
        let owner = make_owner(Some("billing-cron"));
        assert!(owner.starts_with("billing-cron/"), "{owner}");
        assert_eq!(random_part(&owner).len(), 32);
        let bare = make_owner(Some(""));
        assert_eq!(bare.len(), 32);
        assert!(!bare.contains('/'));
    }

    #[test]
    fn a_long_prefix_is_cut_never_the_random_part() {
        let owner = make_owner(Some(&"p".repeat(1 << 20)));
        assert_eq!(owner.len(), MAX_OWNER);
        assert_eq!(random_part(&owner).len(), 32);
        // Cut at a character boundary: 'é' is two bytes.
        let owner = make_owner(Some(&"é".repeat(200)));
        assert!(owner.len() <= MAX_OWNER);
        assert_eq!(random_part(&owner).len(), 32);
        assert!(owner.starts_with('é'));
    }
}
