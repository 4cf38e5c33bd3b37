//! What the file layer did under a watched directory, in order, and a model that replays it
//! keeping what was written apart from what was made durable (tests only): the crash-point
//! test's disk, in the manner of SQLite's and redb's crash tests.
//!
//! Durability as POSIX promises it and no more (ext4, XFS and F2FS each keep a little more,
//! never less):
//! - a file's bytes and length are durable once the file is synced;
//! - a name in a directory (a file or directory made, renamed or removed) once that
//!   directory is synced;
//! - nothing else is.
//!
//! A power cut may keep any part of the rest. [`Model::materialize`] lays out three of its
//! outcomes: [`Image::Synced`], nothing kept that was not durable; [`Image::NamesWritten`],
//! every name as last written but only the bytes that were synced (what a journaling
//! filesystem's ordered metadata can leave: a renamed or new file with none of its bytes);
//! and [`Image::Torn`], every name as written and each file's synced bytes with the first
//! half of its later writes (the page cache written back in part: torn tails, a commit half
//! on disk). A process kill, which keeps everything written, the recorder's `kill -9` tests
//! cover.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// One operation, its paths relative to the watched directory.
#[derive(Clone, Debug)]
pub enum Op {
    MkDirAll(PathBuf),
    /// A file opened with creation (emptied when `truncate`, if it was there).
    Create {
        path: PathBuf,
        truncate: bool,
    },
    Write {
        path: PathBuf,
        offset: u64,
        data: Vec<u8>,
    },
    SetLen {
        path: PathBuf,
        len: u64,
    },
    SyncFile(PathBuf),
    SyncDir(PathBuf),
    Remove(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
}

impl Op {
    /// Whether a power cut just after it can leave something no earlier cut could: a sync,
    /// or a rename (durable only once its directory is synced, but a journaling filesystem
    /// may keep it sooner).
    pub fn is_boundary(&self) -> bool {
        matches!(self, Op::SyncFile(_) | Op::SyncDir(_) | Op::Rename { .. })
    }
}

/// The operations done under one directory since it was watched.
#[derive(Debug)]
pub struct Journal {
    root: PathBuf,
    ops: Mutex<Vec<Op>>,
}

/// Every journal alive; a path belongs to the first whose root it is under (tests run side
/// by side, each in a directory of its own).
static WATCHED: Mutex<Vec<Weak<Journal>>> = Mutex::new(Vec::new());

impl Journal {
    /// Watches `root` (an empty directory, durable as it is) until the journal is dropped.
    pub fn watch(root: &Path) -> Arc<Journal> {
        let j = Arc::new(Journal { root: root.to_path_buf(), ops: Mutex::default() });
        let mut watched = WATCHED.lock().expect("journals");
        watched.retain(|w| w.strong_count() > 0);
        watched.push(Arc::downgrade(&j));
        j
    }

    /// How many operations were done so far.
    pub fn len(&self) -> usize {
        self.ops.lock().expect("journal").len()
    }

    /// The operations done so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("journal").clone()
    }

    fn push(&self, op: Op) {
        self.ops.lock().expect("journal").push(op);
    }
}

/// The journal watching `path`, with `path` relative to its root.
fn find(path: &Path) -> Option<(Arc<Journal>, PathBuf)> {
    let watched = WATCHED.lock().expect("journals");
    watched.iter().filter_map(Weak::upgrade).find_map(|j| {
        let rel = path.strip_prefix(&j.root).ok()?.to_path_buf();
        Some((j, rel))
    })
}

/// Notes an operation on `path`, when a journal watches it.
pub(super) fn note(path: &Path, op: impl FnOnce(PathBuf) -> Op) {
    if let Some((j, rel)) = find(path) {
        j.push(op(rel));
    }
}

/// Notes a rename, when a journal watches both paths.
pub(super) fn note_rename(from: &Path, to: &Path) {
    if let (Some((j, from)), Some((_, to))) = (find(from), find(to)) {
        j.push(Op::Rename { from, to });
    }
}

/// One open file's journal, looked up once at its opening.
#[derive(Debug)]
pub(crate) struct Watch {
    journal: Arc<Journal>,
    rel: PathBuf,
}

impl Watch {
    pub(crate) fn note(&self, op: impl FnOnce(PathBuf) -> Op) {
        self.journal.push(op(self.rel.clone()));
    }
}

/// The journal watching `path`, for a file kept open.
pub(crate) fn watch(path: &Path) -> Option<Watch> {
    find(path).map(|(journal, rel)| Watch { journal, rel })
}

/// Which of a power cut's outcomes to lay out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Image {
    /// Only what was durable.
    Synced,
    /// Every name as last written, with only its file's synced bytes.
    NamesWritten,
    /// Every name as last written, with its file's synced bytes and the first half of the
    /// writes and cuts since (rounded up).
    Torn,
}

impl Image {
    pub const ALL: [Image; 3] = [Image::Synced, Image::NamesWritten, Image::Torn];
}

/// A write or cut to a file since its last sync.
#[derive(Clone)]
enum Change {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

impl Change {
    fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Change::Write { offset, data } => {
                let to = offset + data.len();
                if bytes.len() < to {
                    bytes.resize(to, 0);
                }
                bytes[*offset..to].copy_from_slice(data);
            }
            Change::SetLen(len) => bytes.resize(*len, 0),
        }
    }
}

enum Node {
    File { written: Vec<u8>, durable: Vec<u8>, since_sync: Vec<Change> },
    Dir { written: BTreeMap<OsString, usize>, durable: BTreeMap<OsString, usize> },
}

/// The watched directory as the operations so far left it, written and durable apart.
pub struct Model {
    /// Node 0 is the root; a node is never freed (a removed name may come back at a cut).
    nodes: Vec<Node>,
}

impl Default for Model {
    fn default() -> Model {
        Model { nodes: vec![Node::Dir { written: BTreeMap::new(), durable: BTreeMap::new() }] }
    }
}

impl Model {
    /// Replays one operation. Panics on an operation the model cannot place (a path it
    /// never saw made): the journal and the model disagree, a bug of the test.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::MkDirAll(path) => {
                let mut at = 0;
                for name in names(path) {
                    at = match self.entry(at, &name) {
                        Some(n) => n,
                        None => self.link(at, name, Node::Dir { written: BTreeMap::new(), durable: BTreeMap::new() }),
                    };
                }
            }
            Op::Create { path, truncate } => match self.lookup(path) {
                Some(n) => {
                    if *truncate {
                        self.change(n, path, Change::SetLen(0));
                    }
                }
                None => {
                    let (dir, name) = self.parent(path);
                    let file = Node::File { written: Vec::new(), durable: Vec::new(), since_sync: Vec::new() };
                    self.link(dir, name, file);
                }
            },
            Op::Write { path, offset, data } => {
                let n = self.lookup(path).unwrap_or_else(|| panic!("write to unknown {}", path.display()));
                self.change(n, path, Change::Write { offset: *offset as usize, data: data.clone() });
            }
            Op::SetLen { path, len } => {
                let n = self.lookup(path).unwrap_or_else(|| panic!("cut of unknown {}", path.display()));
                self.change(n, path, Change::SetLen(*len as usize));
            }
            Op::SyncFile(path) => {
                let n = self.lookup(path).unwrap_or_else(|| panic!("sync of unknown {}", path.display()));
                if let Node::File { written, durable, since_sync } = &mut self.nodes[n] {
                    durable.clone_from(written);
                    since_sync.clear();
                }
            }
            Op::SyncDir(path) => {
                let n = self.lookup(path).unwrap_or_else(|| panic!("sync of unknown {}", path.display()));
                if let Node::Dir { written, durable } = &mut self.nodes[n] {
                    durable.clone_from(written);
                }
            }
            Op::Remove(path) => {
                let (dir, name) = self.parent(path);
                self.entries(dir).remove(&name);
            }
            Op::Rename { from, to } => {
                let (dir, name) = self.parent(from);
                let n =
                    self.entries(dir).remove(&name).unwrap_or_else(|| panic!("rename of unknown {}", from.display()));
                let (dir, name) = self.parent(to);
                self.entries(dir).insert(name, n);
            }
        }
    }

    /// Lays out what a power cut just now would leave, under `to` (an empty directory).
    pub fn materialize(&self, image: Image, to: &Path) -> std::io::Result<()> {
        self.lay_out(0, image, to)
    }

    fn lay_out(&self, dir: usize, image: Image, to: &Path) -> std::io::Result<()> {
        let Node::Dir { written, durable } = &self.nodes[dir] else { unreachable!("a directory") };
        let entries = match image {
            Image::Synced => durable,
            Image::NamesWritten | Image::Torn => written,
        };
        for (name, &n) in entries {
            let path = to.join(name);
            match &self.nodes[n] {
                Node::File { durable, since_sync, .. } if image == Image::Torn => {
                    let mut bytes = durable.clone();
                    for c in &since_sync[..since_sync.len().div_ceil(2)] {
                        c.apply(&mut bytes);
                    }
                    std::fs::write(&path, bytes)?
                }
                Node::File { durable, .. } => std::fs::write(&path, durable)?,
                Node::Dir { .. } => {
                    std::fs::create_dir(&path)?;
                    self.lay_out(n, image, &path)?;
                }
            }
        }
        Ok(())
    }

    fn entries(&mut self, dir: usize) -> &mut BTreeMap<OsString, usize> {
        match &mut self.nodes[dir] {
            Node::Dir { written, .. } => written,
            Node::File { .. } => panic!("not a directory"),
        }
    }

    fn entry(&self, dir: usize, name: &OsString) -> Option<usize> {
        match &self.nodes[dir] {
            Node::Dir { written, .. } => written.get(name).copied(),
            Node::File { .. } => None,
        }
    }

    fn link(&mut self, dir: usize, name: OsString, node: Node) -> usize {
        self.nodes.push(node);
        let n = self.nodes.len() - 1;
        self.entries(dir).insert(name, n);
        n
    }

    fn lookup(&self, path: &Path) -> Option<usize> {
        names(path).try_fold(0, |at, name| self.entry(at, &name))
    }

    /// The directory holding `path`, which must exist, and its name there.
    fn parent(&self, path: &Path) -> (usize, OsString) {
        let name = path.file_name().unwrap_or_else(|| panic!("no name in {}", path.display())).to_os_string();
        let dir = path.parent().unwrap_or(Path::new(""));
        let n = self.lookup(dir).unwrap_or_else(|| panic!("no directory for {}", path.display()));
        (n, name)
    }

    fn change(&mut self, n: usize, path: &Path, change: Change) {
        match &mut self.nodes[n] {
            Node::File { written, since_sync, .. } => {
                change.apply(written);
                since_sync.push(change);
            }
            Node::Dir { .. } => panic!("{} is a directory", path.display()),
        }
    }
}

fn names(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::fs;

    /// The files under `dir`, each with its bytes.
    fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    fn laid_out(model: &Model, image: Image) -> BTreeMap<String, Vec<u8>> {
        let to = tempfile::tempdir().unwrap();
        model.materialize(image, to.path()).unwrap();
        tree(to.path())
    }

    #[test]
    fn a_cut_keeps_only_synced_bytes_and_names_of_synced_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let journal = Journal::watch(root);
        let seg = fs::DataFile::create_new(&root.join("rec/a/seg.mp4")).unwrap();
        seg.write_all_at(b"init", 0).unwrap();
        fs::sync_file(&root.join("rec/a/seg.mp4")).unwrap();
        seg.write_all_at(b"frag", 4).unwrap();
        let mut model = Model::default();
        let ops = journal.ops();
        for op in &ops {
            model.apply(op);
        }
        // Synced, but no directory was: nothing survives.
        assert!(laid_out(&model, Image::Synced).is_empty());
        assert_eq!(laid_out(&model, Image::NamesWritten)["rec/a/seg.mp4"], b"init");
        for d in ["rec/a", "rec", ""] {
            fs::sync_dir(&root.join(d)).unwrap();
        }
        for op in &journal.ops()[ops.len()..] {
            model.apply(op);
        }
        assert_eq!(laid_out(&model, Image::Synced)["rec/a/seg.mp4"], b"init", "the unsynced fragment is lost");

        // A removal not yet synced comes back; a rename is durable with its directory.
        let before = journal.len();
        fs::remove_file(&root.join("rec/a/seg.mp4")).unwrap();
        fs::write_synced(&root.join("rec/snap.jpg"), b"jpeg").unwrap();
        for op in &journal.ops()[before..] {
            model.apply(op);
        }
        let synced = laid_out(&model, Image::Synced);
        assert_eq!(synced["rec/a/seg.mp4"], b"init");
        assert_eq!(synced["rec/snap.jpg"], b"jpeg");
        assert!(!laid_out(&model, Image::NamesWritten).contains_key("rec/a/seg.mp4"));
        drop(journal);
        // Unwatched, nothing is noted.
        let after = Journal::watch(&root.join("elsewhere"));
        fs::sync_dir(root).unwrap();
        assert_eq!(after.len(), 0);
    }

    #[test]
    fn a_renamed_file_whose_bytes_were_never_synced_is_empty_with_its_name_kept() {
        let mut model = Model::default();
        let p = PathBuf::from;
        for op in [
            Op::MkDirAll(p("e")),
            Op::SyncDir(p("")),
            Op::Create { path: p("e/x.tmp"), truncate: true },
            Op::Write { path: p("e/x.tmp"), offset: 0, data: b"abc".to_vec() },
            Op::Rename { from: p("e/x.tmp"), to: p("e/x") },
        ] {
            model.apply(&op);
        }
        assert!(laid_out(&model, Image::Synced).is_empty());
        assert_eq!(laid_out(&model, Image::NamesWritten)["e/x"], b"");
        assert_eq!(laid_out(&model, Image::Torn)["e/x"], b"abc", "its one write, rounded up");
    }

    #[test]
    fn a_torn_file_keeps_its_synced_bytes_and_the_first_half_of_its_later_writes() {
        let mut model = Model::default();
        let p = PathBuf::from;
        model.apply(&Op::Create { path: p("f"), truncate: true });
        model.apply(&Op::Write { path: p("f"), offset: 0, data: b"head".to_vec() });
        model.apply(&Op::SyncFile(p("f")));
        model.apply(&Op::SyncDir(p("")));
        for (i, part) in [&b"aa"[..], b"bb", b"cc", b"dd"].into_iter().enumerate() {
            model.apply(&Op::Write { path: p("f"), offset: 4 + 2 * i as u64, data: part.to_vec() });
        }
        assert_eq!(laid_out(&model, Image::Synced)["f"], b"head");
        assert_eq!(laid_out(&model, Image::Torn)["f"], b"headaabb");
        model.apply(&Op::SetLen { path: p("f"), len: 2 });
        assert_eq!(laid_out(&model, Image::Torn)["f"], b"headaabbcc");
    }
}
