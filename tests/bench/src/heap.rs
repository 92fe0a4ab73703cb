//! The process's heap: the allocator the service binaries use (see their
//! main.rs), counting the bytes allocated and not yet freed — what (d)
//! reads to tell memory a parked run still holds from pages the allocator
//! keeps (RSS). The count is one relaxed atomic add per allocation and
//! free.

#[global_allocator]
static ALLOC: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);

/// Bytes allocated and not yet freed in this process now.
pub(crate) fn live_bytes() -> usize {
    ALLOC.allocated()
}
