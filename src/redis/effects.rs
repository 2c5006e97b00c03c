//! Carries an [`Effect`] out, spelled as [`Effect::argv`] says: to replicas and the AOF as a
//! propagated command (`RedisModule_Replicate`), or into an AOF rewrite (`RedisModule_EmitAOF`).
//! One encoder for both, with one format (`v`: a vector of strings built here), so no format
//! string is ever matched to its arguments by hand.

use std::ffi::CString;
use std::os::raw::c_char;

use redis_module::raw;

use super::ffi::OwnedString;
use crate::lock::{Effect, Word};

/// An effect's command as Redis strings: its name, and its arguments with the key in place.
struct Encoded {
    name: CString,
    argv: Vec<*mut raw::RedisModuleString>,
    /// The strings made here, freed once the command has been handed to Redis (which keeps
    /// its own references).
    _owned: Vec<OwnedString>,
}

/// Spells `effect` for `key` (null for a keyless effect); `None` if a string could not be made
/// (out of memory: the caller propagates nothing rather than something wrong).
fn encode(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    effect: &Effect<'_>,
) -> Option<Encoded> {
    let (name, words) = effect.argv();
    let mut owned = Vec::with_capacity(words.len());
    let mut argv = Vec::with_capacity(words.len());
    for word in words {
        let string = match word {
            Word::Key => {
                argv.push(key);
                continue;
            }
            Word::Bytes(bytes) => OwnedString::new(ctx, bytes)?,
            Word::Int(n) => OwnedString::new(ctx, n.to_string().as_bytes())?,
        };
        argv.push(string.as_ptr());
        owned.push(string);
    }
    Some(Encoded {
        name: CString::new(name).ok()?,
        argv,
        _owned: owned,
    })
}

/// Propagates `effect` on `key` to replicas and the AOF from the running callback.
pub fn replicate(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    effect: &Effect<'_>,
) {
    let Some(encoded) = encode(ctx, key, effect) else {
        return;
    };
    // SAFETY: format "v" takes a pointer to `argv.len()` live strings and that length; the
    // strings outlive the call (Redis takes references to those it keeps).
    unsafe {
        rm!(RedisModule_Replicate(
            ctx,
            encoded.name.as_ptr(),
            c"v".as_ptr(),
            encoded.argv.as_ptr(),
            encoded.argv.len()
        ))
    };
}

/// Writes `effect` on `key` into the AOF being rewritten.
pub fn emit(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, effect: &Effect<'_>) {
    // The rewrite's key is a string on Redis's stack, which must not be retained (the `v` format
    // takes a reference to every string it is given): a copy goes instead.
    // SAFETY: Redis passes the key's name, alive for the length of the callback.
    let Some(key) = OwnedString::new(std::ptr::null_mut(), unsafe {
        super::ffi::string_bytes(key)
    }) else {
        return;
    };
    let Some(encoded) = encode(std::ptr::null_mut(), key.as_ptr(), effect) else {
        return;
    };
    // SAFETY: as in `replicate`, with the rewrite's IO context.
    unsafe {
        rm!(RedisModule_EmitAOF(
            aof,
            encoded.name.as_ptr(),
            c"v".as_ptr() as *const c_char,
            encoded.argv.as_ptr(),
            encoded.argv.len()
        ))
    };
}
