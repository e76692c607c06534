"""The mutations ci/mutations.sh tries: each breaks one security invariant.

    python3 ci/mutations.py --list          the names, one a line
    python3 ci/mutations.py <tree> <name>   apply one to the tree at <tree>

Each is an exact piece of code and its replacement; a piece that is not
found exactly once fails (the code changed: update the mutation).
"""
import sys

MUTATIONS = {
    # Registry::check refuses out-of-bounds accesses.
    "bounds": (
        "provider/src/mr/registry.rs",
        "if addr < region.iova || end > region_end {",
        "if addr < region.iova {",
    ),
    # The cache drops an entry when its memory is unmapped.
    "cache-unmap": (
        "provider/src/mr/cache/mod.rs",
        ".filter(|(_, v)| overlaps(v.entry.start, v.entry.len.max(1), inv))",
        ".filter(|(_, v)| inv.cause != Cause::Unmap && overlaps(v.entry.start, v.entry.len.max(1), inv))",
    ),
    # An open registration is revoked when its memory is unmapped.
    "revoke-live": (
        "provider/src/mr/cache/mod.rs",
        "            self.revoke_live_in(inv);\n",
        "            // (mutated: revoke_live_in skipped)\n",
    ),
    # The RMA target checks the key: this falls back to any registration
    # holding the address.
    "key-check": (
        "provider/src/mr/registry.rs",
        "m.get(&key).cloned().ok_or(AccessError::UnknownKey)?",
        "m.get(&key).cloned().or_else(|| self.shards.iter().find_map(|s| s.0.try_read().ok().and_then("
        "|m| m.values().find(|r| addr >= r.iova && addr < r.iova + r.len as u64).cloned())))"
        ".or_else(|| m.values().find(|r| addr >= r.iova && addr < r.iova + r.len as u64).cloned())"
        ".ok_or(AccessError::UnknownKey)?",
    ),
    # Batched writes check rights.
    "batch-rights": (
        "provider/src/protocol/engine/rma_target.rs",
        "            let access = ffi::FI_REMOTE_WRITE as u64;\n",
        "            let access = 0;\n",
    ),
    # A registration not enabled under FI_MR_ENDPOINT is refused.
    "mr-endpoint": (
        "provider/src/mr/registry.rs",
        "if !region.enabled.load(Ordering::Acquire) {",
        "if false && !region.enabled.load(Ordering::Acquire) {",
    ),
    # A pin is rechecked for unmaps that happened while it was made.
    "recheck-unmap": (
        "provider/src/mr/cache/mod.rs",
        "    fn touched_since(&self, since: u64, a: usize, l: usize) -> bool {\n",
        "    fn touched_since(&self, since: u64, a: usize, l: usize) -> bool {\n"
        "        if since < u64::MAX {\n            return false;\n        }\n",
    ),
    # A BAR registration must lie inside its BAR.
    "bar-bounds": (
        "provider/src/mr/device.rs",
        "if piece_off + (hi - lo) as u64 > end + 1 {",
        "if piece_off > end + 1 {",
    ),
    # Remote accesses to MMIO memory are 4-byte aligned.
    "mmio-align": (
        "provider/src/mr/registry.rs",
        "if region.mmio && !((addr - region.iova) | len).is_multiple_of(4) {",
        "if false && region.mmio {",
    ),
    # Only what the kernel says is a dma-buf registers as one.
    "dmabuf-magic": (
        "provider/src/mr/dmabuf.rs",
        "if sf.f_type as i64 != DMA_BUF_MAGIC {",
        "if false {",
    ),
}

if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join(MUTATIONS))
        sys.exit(0)
    tree, name = sys.argv[1], sys.argv[2]
    path, a, b = MUTATIONS[name]
    p = f"{tree}/{path}"
    s = open(p).read()
    if s.count(a) != 1:
        sys.exit(f"{path}: the code to mutate appears {s.count(a)} times, not once: update ci/mutations.py")
    open(p, "w").write(s.replace(a, b))
