//! CPU sets and the Linux cpu-list syntax (`0-3,8,10-11`).
//!
//! Owns: the [`CpuSet`] value type, parsing and printing of cpu-lists as sysfs writes them and
//! as users type them in `cpus = "1-3"`, and conversion to the kernel's bitmask layout.
//! Must not touch: the file system or any syscall — callers read the text and pass it in.

use std::fmt;

/// A set of logical CPU ids, kept sorted and free of duplicates.
///
/// A sorted `Vec<u32>` rather than a bitmap: the sets are small (at most a few hundred CPUs),
/// iteration in CPU order is what every caller wants, and the text form is what users see.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(Vec<u32>);

/// Why a cpu-list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuListError(pub String);

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CpuListError {}

/// The highest CPU id we accept; Linux's own `NR_CPUS` maximum is 8192.
pub const MAX_CPU_ID: u32 = 8191;

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        CpuSet(Vec::new())
    }

    /// Builds a set from any ids, sorting and removing duplicates.
    pub fn from_ids<I: IntoIterator<Item = u32>>(ids: I) -> Self {
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        CpuSet(v)
    }

    /// Parses a cpu-list: comma-separated ids or ranges `a-b`, optionally with a stride
    /// `a-b:step` (the kernel's own extension). Blank text is the empty set, as sysfs prints it.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let text = text.trim();
        let mut ids = Vec::new();
        if text.is_empty() {
            return Ok(CpuSet(ids));
        }
        for part in text.split(',') {
            let part = part.trim();
            let bad = || CpuListError(format!("`{part}` is not a CPU id or range like 0-3"));
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => (r, s.trim().parse::<u32>().map_err(|_| bad())?),
                None => (part, 1),
            };
            if stride == 0 {
                return Err(bad());
            }
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (parse_id(a).ok_or_else(bad)?, parse_id(b).ok_or_else(bad)?),
                None => {
                    let id = parse_id(range).ok_or_else(bad)?;
                    (id, id)
                }
            };
            if lo > hi {
                return Err(CpuListError(format!("range `{part}` runs backwards")));
            }
            if hi > MAX_CPU_ID {
                return Err(CpuListError(format!(
                    "CPU {hi} is beyond the largest id Linux supports ({MAX_CPU_ID})"
                )));
            }
            ids.extend((lo..=hi).step_by(stride as usize));
        }
        Ok(CpuSet::from_ids(ids))
    }

    /// Parses the kernel's hexadecimal mask form (`smp_affinity`, `rps_cpus`): comma-separated
    /// 32-bit words, most significant first.
    pub fn parse_mask(text: &str) -> Result<Self, CpuListError> {
        let words: Vec<&str> = text.trim().split(',').collect();
        let mut ids = Vec::new();
        for (i, word) in words.iter().rev().enumerate() {
            let w = u32::from_str_radix(word.trim(), 16).map_err(|_| {
                CpuListError(format!("`{}` is not a hexadecimal CPU mask", text.trim()))
            })?;
            for bit in 0..32 {
                if w & (1 << bit) != 0 {
                    ids.push(i as u32 * 32 + bit);
                }
            }
        }
        Ok(CpuSet::from_ids(ids))
    }

    /// The kernel's hexadecimal mask form, as written to `rps_cpus` / `xps_cpus`.
    pub fn to_mask(&self) -> String {
        let words = self.0.last().map_or(1, |&m| m as usize / 32 + 1);
        let mut out = vec![0u32; words];
        for &id in &self.0 {
            out[id as usize / 32] |= 1 << (id % 32);
        }
        out.iter()
            .rev()
            .map(|w| format!("{w:08x}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, id: u32) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    pub fn insert(&mut self, id: u32) {
        if let Err(pos) = self.0.binary_search(&id) {
            self.0.insert(pos, id);
        }
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(
            self.0
                .iter()
                .copied()
                .filter(|&c| other.contains(c))
                .collect(),
        )
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet::from_ids(self.0.iter().chain(other.0.iter()).copied())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(
            self.0
                .iter()
                .copied()
                .filter(|&c| !other.contains(c))
                .collect(),
        )
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.iter().all(|&c| other.contains(c))
    }
}

fn parse_id(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Prints the compact cpu-list form (`0-3,8`), the same text the kernel writes in sysfs.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet::from_ids(iter)
    }
}

/// Serialized as a JSON array of ids, which is what tools consuming `--json` expect.
impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(CpuSet::from_ids(Vec::<u32>::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_sysfs_forms() {
        let s = CpuSet::parse("0-3,8,10-11\n").unwrap();
        assert_eq!(s.as_slice(), &[0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse("0-7:2").unwrap().to_string(), "0,2,4,6");
    }

    #[test]
    fn rejects_bad_lists() {
        for bad in ["a", "3-1", "1-", "-1", "1,,2", "0-3:0", "9000"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn masks_round_trip() {
        let s = CpuSet::from_ids([0, 1, 33, 40]);
        assert_eq!(s.to_mask(), "00000102,00000003");
        assert_eq!(CpuSet::parse_mask(&s.to_mask()).unwrap(), s);
        assert_eq!(CpuSet::parse_mask("e").unwrap().to_string(), "1-3");
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-5").unwrap();
        let b = CpuSet::parse("4-9").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "4-5");
        assert_eq!(a.union(&b).to_string(), "0-9");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
    }
}
