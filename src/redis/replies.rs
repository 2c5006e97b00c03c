//! Replies built field by field: `LOCK.INFO`'s map (a command's reply, and an observer's
//! answer from its blocked-client callback) and the maps of the listings. A map under RESP3, a
//! flat array under RESP2.

use std::ffi::CStr;
use std::os::raw::c_long;

use redis_module::raw;

use crate::lock::{Info, Mode};

type Ctx = *mut raw::RedisModuleCtx;

/// `LOCK.INFO`'s map: the five fields of old, then mode, holders, limit and permits_free.
pub fn reply_info(ctx: Ctx, info: &Info) {
    let (mode, limit) = match info.mode {
        Mode::Exclusive => (c"exclusive", 1),
        Mode::Shared { limit, .. } => (c"shared", limit),
    };
    let fields = Fields::start(ctx, 9);
    fields.name(c"owner");
    match &info.owner {
        // SAFETY: `ctx` is the running command's context; the owner is passed with its length.
        Some(owner) => unsafe {
            rm!(RedisModule_ReplyWithStringBuffer(
                ctx,
                owner.as_ptr().cast(),
                owner.len()
            ));
        },
        None => reply_optional(ctx, None),
    }
    fields
        .optional(c"token", info.token.map(|t| t as i64))
        .optional(c"count", info.count.map(i64::from))
        .int(c"ttl", info.ttl_ms)
        .int(c"waiters", info.waiters as i64)
        .word(c"mode", mode)
        .int(c"holders", info.holders as i64)
        .int(c"limit", i64::from(limit))
        .int(c"permits_free", info.permits_free);
}

/// An integer, or nil.
pub fn reply_optional(ctx: Ctx, value: Option<i64>) {
    // SAFETY: `ctx` is the running command's context.
    unsafe {
        match value {
            Some(n) => rm!(RedisModule_ReplyWithLongLong(ctx, n)),
            None => rm!(RedisModule_ReplyWithNull(ctx)),
        };
    }
}

/// A map of `fields` pairs under RESP3, a flat array under RESP2; each value written by the
/// caller after its name.
pub struct Fields(Ctx);

impl Fields {
    pub fn start(ctx: Ctx, fields: usize) -> Fields {
        // SAFETY: `ctx` is the running command's context.
        unsafe { rm!(RedisModule_ReplyWithMap(ctx, fields as c_long)) };
        Fields(ctx)
    }

    pub fn name(&self, name: &CStr) -> &Self {
        // SAFETY: as in `start`; `name` is a C string.
        unsafe { rm!(RedisModule_ReplyWithCString(self.0, name.as_ptr())) };
        self
    }

    pub fn int(&self, name: &CStr, value: i64) -> &Self {
        self.name(name);
        // SAFETY: as in `start`.
        unsafe { rm!(RedisModule_ReplyWithLongLong(self.0, value)) };
        self
    }

    pub fn bytes(&self, name: &CStr, value: &[u8]) -> &Self {
        self.name(name);
        // SAFETY: as in `start`; the buffer is passed with its length.
        unsafe {
            rm!(RedisModule_ReplyWithStringBuffer(
                self.0,
                value.as_ptr().cast(),
                value.len()
            ))
        };
        self
    }

    pub fn word(&self, name: &CStr, value: &CStr) -> &Self {
        self.name(name);
        // SAFETY: as in `start`; `value` is a C string.
        unsafe { rm!(RedisModule_ReplyWithCString(self.0, value.as_ptr())) };
        self
    }

    pub fn optional(&self, name: &CStr, value: Option<i64>) -> &Self {
        self.name(name);
        reply_optional(self.0, value);
        self
    }
}
