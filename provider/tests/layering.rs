//! The layering rule, checked on the source: each room of `provider/src`
//! names (`crate::<room>`, in a `use` or inline) only rooms below it.
//!
//! ```text
//! boundary     the C ABI
//! objects      the libfabric objects
//! protocol     message header and engine
//! wire         the wires (shm: the same-host one) behind one interface
//! info         fi_getinfo's answers
//! queues       completion queue and counter cores, wait objects
//! config       the parsed FI_OXMR_* values (of mr's and the wires' types)
//! auth         the job key (HMAC proofs)
//! mr           registration, pinning, the cache
//! sys, error, ext   leaves: syscalls, the error type, the extension
//!              API's C types and constants
//! ```
//!
//! Rooms on one line may not import each other either (each is a leaf of
//! its own, or only the ones listed below it). And the data path goes one
//! step at a time: only `protocol` drives a wire, and only
//! `objects` drive the protocol. A file that names a room
//! above its own fails the test with the file, line and name, so an upward
//! import is caught the day it is written. And the protocol names no
//! wire in particular (`the_protocol_names_no_wire`): it decides by what a
//! wire is, so adding one is a folder under `wire/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Rooms from the top down: a room may name only rooms of a higher rank
/// number (further down this list).
const ORDER: &[&[&str]] = &[
    &["boundary"],
    &["objects"],
    &["protocol"],
    &["wire"],
    &["info"],
    &["queues"],
    &["config"],
    &["auth"],
    &["mr"],
    &["sys", "error", "ext"],
];

/// Rooms that only the named rooms may import (data flows boundary ->
/// objects -> protocol -> wire: only the protocol drives a wire, and only
/// the objects drive the protocol).
const ONLY_FROM: &[(&str, &[&str])] = &[("wire", &["protocol"]), ("protocol", &["objects"])];

fn rank(room: &str) -> Option<usize> {
    ORDER.iter().position(|floor| floor.contains(&room))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read provider/src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The room of a file: its first folder under src/, or its stem.
fn room_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("non-empty").as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::<room>` a line names, outside comments (and strings that
/// happen to hold it, which the source has none of).
fn named_rooms(line: &str) -> Vec<String> {
    let code = match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `$crate::` (macros) and `oxmr_crate::` are not this crate's paths.
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            // `use crate::{a, b::c}`: the first name of every item in the
            // braces (split at the commas outside inner braces).
            if let Some(body) = rest.strip_prefix('{') {
                let (mut depth, mut item) = (0, String::new());
                let mut items = Vec::new();
                for c in body.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                        _ => item.push(c),
                    }
                }
                items.push(item);
                for it in items {
                    let first: String = it.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !first.is_empty() {
                        out.push(first);
                    }
                }
            }
            continue;
        }
        out.push(name);
    }
    out
}

/// `#[macro_export]` macros sit at the crate root (`crate::fail`), but
/// belong to the room that defines them: name -> room.
fn exported_macros(src: &Path, files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("read source");
        let mut exported = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("#[macro_export]") {
                exported = true;
            } else if let Some(rest) = t.strip_prefix("macro_rules!") {
                if exported {
                    let name: String = rest.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    out.insert(name, room_of(src, f));
                }
                exported = false;
            } else if !t.starts_with("#[") && !t.starts_with("///") && !t.is_empty() {
                exported = false;
            }
        }
    }
    out
}

fn violations() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    let macros = exported_macros(&src, &files);
    let mut bad = Vec::new();
    for f in &files {
        let room = room_of(&src, f);
        let Some(mine) = rank(&room) else { continue };
        let text = std::fs::read_to_string(f).expect("read source");
        let mut in_tests = false;
        for (n, line) in text.lines().enumerate() {
            // A file's own unit tests may reach anything (they build the
            // world they test); the rule is for the code.
            if line.trim_start().starts_with("#[cfg(test)]") {
                in_tests = true;
            }
            if in_tests {
                continue;
            }
            for name in named_rooms(line) {
                let name = macros.get(&name).cloned().unwrap_or(name);
                let Some(theirs) = rank(&name) else { continue };
                let barred =
                    ONLY_FROM.iter().any(|(r, from)| *r == name && name != room && !from.contains(&room.as_str()));
                if barred {
                    bad.push(format!(
                        "{}:{}: room `{room}` names `crate::{name}`, which only {:?} may use: {}",
                        f.strip_prefix(&src).unwrap_or(f).display(),
                        n + 1,
                        ONLY_FROM.iter().find(|(r, _)| *r == name).map_or(&[][..], |x| x.1),
                        line.trim()
                    ));
                }
                if name != room && theirs <= mine {
                    bad.push(format!(
                        "{}:{}: room `{room}` names `crate::{name}`, which is not below it: {}",
                        f.strip_prefix(&src).unwrap_or(f).display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn every_room_imports_only_rooms_below_it() {
    let bad = violations();
    assert!(bad.is_empty(), "{} upward imports:\n{}", bad.len(), bad.join("\n"));
}

/// The lines of `mr` (registration, pinning, the cache) outside its tests
/// that name TCP, in any case: `mr` holds the domain's io_uring and its
/// fixed-buffer table, and knows nothing of the wire that sends from it
/// (the TCP wire's ring use, SEND_ZC and send counters are in
/// `wire/tcp/ring.rs`, the domain's share of them `wire::DomainWires`).
fn mr_lines_naming_tcp() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src.join("mr"), &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in &files {
        // (A test module of its own file: `mod tests;` in `tests.rs`.)
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read source");
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            // An inline test module runs to the end of its file (as the
            // rooms' check assumes); a test-only item elsewhere is checked.
            let next = lines.get(n + 1).map_or("", |l| l.trim());
            if line.trim_start().starts_with("#[cfg(test)]") && next.contains("mod ") && next.ends_with('{') {
                break;
            }
            if line.to_ascii_lowercase().contains("tcp") {
                bad.push(format!("{}:{}: {}", f.strip_prefix(&src).unwrap_or(f).display(), n + 1, line.trim()));
            }
        }
    }
    bad
}

#[test]
fn mr_names_no_tcp() {
    let bad = mr_lines_naming_tcp();
    assert!(bad.is_empty(), "{} lines of mr/ name TCP (it belongs in wire/):\n{}", bad.len(), bad.join("\n"));
}

/// What names one wire in particular: the protocol decides by what a wire
/// is (`wire::Props`), never by which one it is, so a new wire needs no
/// edit there.
fn names_a_wire(line: &str) -> bool {
    ["Tcp", "tcp_", "MAX_FRAME"].iter().any(|w| line.contains(w))
}

/// The lines of `text` that are not test code, numbered from 1: an item
/// under `#[cfg(test)]` (a `mod tests { .. }`, or a `mod tests;` whose
/// file is test code as a whole) is skipped to its end, where its braces
/// close (or its `;` ends it).
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut skipping, mut depth, mut opened) = (false, 0i32, false);
    for (n, line) in text.lines().enumerate() {
        if !skipping && line.trim_start().starts_with("#[cfg(test)]") {
            (skipping, depth, opened) = (true, 0, false);
            continue;
        }
        if !skipping {
            out.push((n + 1, line));
            continue;
        }
        let code = line.find("//").map_or(line, |i| &line[..i]);
        for c in code.chars() {
            match c {
                '{' => (depth, opened) = (depth + 1, true),
                '}' => depth -= 1,
                _ => {}
            }
        }
        let t = code.trim_end();
        if (opened && depth <= 0) || (!opened && !t.trim_start().starts_with("#[") && t.ends_with(';')) {
            skipping = false;
        }
    }
    out
}

/// Every non-test line of `src/protocol` that names a wire (files named
/// `tests.rs` are tests; so is an item under `#[cfg(test)]`).
fn protocol_lines_naming_a_wire(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rs_files(&src.join("protocol"), &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(f).expect("read source");
        for (n, line) in code_lines(&text) {
            if names_a_wire(line) {
                bad.push(format!("{}:{n}: {}", f.strip_prefix(src).unwrap_or(f).display(), line.trim()));
            }
        }
    }
    bad
}

#[test]
fn the_protocol_names_no_wire() {
    let bad = protocol_lines_naming_a_wire(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        bad.is_empty(),
        "{} lines of protocol/ name a wire (ask the link's `props()`, or move the code into wire/):\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(names_a_wire("Wire::Tcp") && names_a_wire("cfg.tcp_lanes") && !names_a_wire("FRAME_FLOOR"));
}

#[test]
fn test_items_are_skipped_to_their_end() {
    let text =
        "a\n#[cfg(test)]\nmod tests;\nb\n#[cfg(test)]\n#[allow(x)]\nfn t() {\n  {x}\n}\nc\n#[cfg(test)]\nmod m {\n}";
    let kept: Vec<&str> = code_lines(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, ["a", "b", "c"]);
}

#[test]
fn the_checker_sees_use_lists_and_inline_paths() {
    assert_eq!(named_rooms("use crate::mr::registry::Region;"), ["mr"]);
    assert_eq!(named_rooms("use crate::{fail, boundary::Error};"), ["fail", "boundary"]);
    assert_eq!(named_rooms("    let x = crate::sys::random_u32(); // crate::objects"), ["sys"]);
    assert_eq!(named_rooms("        $crate::boundary::guard(...)"), Vec::<String>::new());
}
