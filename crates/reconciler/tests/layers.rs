//! The module graph of every crate in the workspace, read from the source: no module imports
//! one that imports it back (directly or through others), and inside this crate each layer
//! imports only the layers below it (docs/development.md, "Layers"). Run with `--nocapture` (or
//! `just modules`) to print the graph.
//!
//! A module is a file (`a.rs` or `a/mod.rs` is `a`, `a/b.rs` is `a::b`); it imports another when
//! its code (not its comments, not its `#[cfg(test)]` modules, which may use fixtures from
//! anywhere) names a path into it: `crate::a::b`, `super::b`, or `b::` for a child `b`. A name
//! the crate root re-exports (`pub use a::Name`) counts as an import of `a`; the root's own
//! `pub use` lines are not imports (declaring and re-exporting is what a root is for).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of `homestead-reconciler`, bottom first, with the layers each may import.
const LAYERS: [(&str, &[&str]); 8] = [
    ("plan", &[]),
    ("error", &[]),
    ("metrics", &["error"]),
    ("state", &["plan"]),
    ("act", &["plan", "state", "error", "metrics"]),
    ("context", &["plan", "state", "act", "error", "metrics"]),
    (
        "flows",
        &["plan", "state", "act", "context", "error", "metrics"],
    ),
    (
        "runtime",
        &[
            "plan", "state", "act", "context", "flows", "error", "metrics",
        ],
    ),
];

/// One crate's modules (by path, `""` for the root) and what each imports.
struct Graph {
    name: String,
    imports: BTreeMap<String, BTreeSet<String>>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The module path of the file `file` under `src`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// `source` without comments and without `#[cfg(test)]` modules; and the names of the child
/// modules declared under `#[cfg(test)]` (whole files that are tests).
fn code_of(source: &str) -> (String, BTreeSet<String>) {
    let (mut code, mut test_children) = (String::new(), BTreeSet::new());
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            let Some(next) = lines.next() else { break };
            let next_trimmed = next.trim_start();
            let declared = ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .find_map(|v| next_trimmed.strip_prefix(v));
            if let Some(rest) = declared {
                if let Some(name) = rest.strip_suffix(';') {
                    test_children.insert(name.to_owned());
                    continue;
                }
                let indent = &next[..next.len() - next_trimmed.len()];
                let end = format!("{indent}}}");
                for inner in lines.by_ref() {
                    if inner == end {
                        break;
                    }
                }
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let without = line.split("//").next().unwrap_or_default();
        code.push_str(without);
        code.push('\n');
    }
    (code, test_children)
}

/// The paths `code` names after `prefix` (`crate::`, `super::`), each as its segments; a group
/// (`crate::{a, b::c}`) gives one path per member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for member in group.split(',') {
                paths.push(segments(member.trim()));
            }
        } else {
            paths.push(segments(rest));
        }
    }
    paths
}

/// The leading `a::b::c` segments of `text`.
fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    out
}

/// The longest known module that `path` (segments from the crate root) lies in.
fn resolve(
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
    path: &[String],
) -> String {
    for len in (1..=path.len()).rev() {
        let candidate = path[..len].join("::");
        if modules.contains(&candidate) {
            return candidate;
        }
    }
    path.first()
        .and_then(|name| reexports.get(name).cloned())
        .unwrap_or_default()
}

/// The names the crate root re-exports, to the module that defines them.
fn reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in root.lines().filter(|l| l.starts_with("pub use ")) {
        let path = line.trim_start_matches("pub use ").trim_end_matches(';');
        let (module, items) = match path.split_once("::{") {
            Some((module, items)) => (module, items.trim_end_matches('}').to_owned()),
            None => path
                .rsplit_once("::")
                .map_or(("", String::new()), |(m, i)| (m, i.to_owned())),
        };
        let module = resolve(modules, &BTreeMap::new(), &segments(module));
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            names.insert(item.to_owned(), module.clone());
        }
    }
    names
}

/// The module graph of the crate whose sources are in `src`.
fn graph(name: &str, src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let sources: BTreeMap<String, String> = files
        .iter()
        .map(|f| {
            (
                module_of(src, f),
                std::fs::read_to_string(f).expect("a source file"),
            )
        })
        .collect();
    let mut tests = BTreeSet::new();
    let mut code = BTreeMap::new();
    for (module, source) in &sources {
        let (text, children) = code_of(source);
        for child in children {
            tests.insert(if module.is_empty() {
                child
            } else {
                format!("{module}::{child}")
            });
        }
        code.insert(module.clone(), text);
    }
    let modules: BTreeSet<String> = code
        .keys()
        .filter(|m| {
            !tests
                .iter()
                .any(|t| *m == t || m.starts_with(&format!("{t}::")))
        })
        .cloned()
        .collect();
    let reexports = reexports(code.get("").map_or("", String::as_str), &modules);
    let mut imports = BTreeMap::new();
    for module in &modules {
        let text = &code[module];
        let mut to = BTreeSet::new();
        for path in paths_after(text, "crate::") {
            to.insert(resolve(&modules, &reexports, &path));
        }
        let parent: Vec<String> = module.split("::").map(str::to_owned).collect();
        let parent = &parent[..parent.len().saturating_sub(1)];
        for path in paths_after(text, "super::") {
            let full: Vec<String> = parent.iter().cloned().chain(path).collect();
            to.insert(resolve(&modules, &reexports, &full));
        }
        let children = modules.iter().filter_map(|m| {
            let name = if module.is_empty() {
                m.as_str()
            } else {
                m.strip_prefix(module.as_str())?.strip_prefix("::")?
            };
            (!name.is_empty() && !name.contains("::")).then(|| (name.to_owned(), m.clone()))
        });
        let own: String = text
            .lines()
            .filter(|l| !(module.is_empty() && l.starts_with("pub use ")))
            .collect::<Vec<_>>()
            .join("\n");
        for (name, child) in children {
            if !paths_after(&own, &format!("{name}::")).is_empty() {
                to.insert(child);
            }
        }
        to.remove(module);
        imports.insert(module.clone(), to);
    }
    Graph {
        name: name.to_owned(),
        imports,
    }
}

/// The groups of modules that import each other (strongly connected components of more than
/// one module), each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in graph.imports.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.imports.keys().map(|m| (m, reach(m))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, from_m) in &reaches {
        let group: Vec<String> = from_m
            .iter()
            .filter(|n| reaches.get(n).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        if !group.is_empty() {
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

fn crates() -> Vec<Graph> {
    let mut out = Vec::new();
    let root = workspace().join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("crates/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        out.push(graph(&name, &dir.join("src")));
    }
    out
}

fn print(graph: &Graph) {
    println!("crate {}:", graph.name);
    for (module, to) in &graph.imports {
        let name = if module.is_empty() { "(root)" } else { module };
        let to: Vec<&str> = to
            .iter()
            .map(|m| if m.is_empty() { "(root)" } else { m })
            .collect();
        println!("  {name} -> {}", to.join(", "));
    }
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for graph in crates() {
        print(&graph);
        for cycle in cycles(&graph) {
            found.push(format!("{}: {}", graph.name, cycle.join(" <-> ")));
        }
    }
    println!("cycles: {}", found.len());
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn each_layer_of_the_reconciler_imports_only_the_layers_below_it() {
    let graph = graph("reconciler", &workspace().join("crates/reconciler/src"));
    let layer_of = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.into_iter().collect();
    let mut wrong = Vec::new();
    for (module, to) in &graph.imports {
        if module.is_empty() {
            continue;
        }
        let layer = layer_of(module);
        let may = allowed
            .get(layer.as_str())
            .unwrap_or_else(|| panic!("module {module} is in no layer of LAYERS"));
        for target in to.iter().map(|t| layer_of(t)) {
            if target != layer && !may.contains(&target.as_str()) {
                wrong.push(format!("{module} ({layer}) imports {target}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports across layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn plans_are_pure() {
    let mut files = Vec::new();
    let plan = workspace().join("crates/reconciler/src/plan");
    rust_files(&plan, &mut files);
    assert!(files.len() > 5, "the plan layer is where it says: {plan:?}");
    for file in files {
        let (code, _) = code_of(&std::fs::read_to_string(&file).expect("a source file"));
        for needle in [
            "async ",
            ".await",
            "kube::Client",
            "kube::api::",
            "Context",
            "tokio::",
        ] {
            assert!(
                !code.contains(needle),
                "{file:?} uses {needle:?}: a plan is pure"
            );
        }
    }
}

#[test]
fn the_graph_reader_sees_paths_groups_and_test_modules() {
    let source = "use crate::{a, b::c};\nuse super::d;\n// crate::commented\n#[cfg(test)]\nmod tests {\n    use crate::e;\n}\n#[cfg(test)]\nmod fixtures;\nfn f() { crate::g::h(); }\n";
    let (code, tests) = code_of(source);
    assert!(
        !code.contains("commented") && !code.contains("crate::e"),
        "{code}"
    );
    assert_eq!(tests, BTreeSet::from(["fixtures".to_owned()]));
    let paths = paths_after(&code, "crate::");
    assert_eq!(paths, [vec!["a"], vec!["b", "c"], vec!["g", "h"]]);
    let cyclic = Graph {
        name: "t".into(),
        imports: BTreeMap::from([
            ("a".into(), BTreeSet::from(["b".into()])),
            ("b".into(), BTreeSet::from(["a".into()])),
            ("c".into(), BTreeSet::from(["a".into()])),
        ]),
    };
    assert_eq!(cycles(&cyclic), [vec!["a".to_owned(), "b".to_owned()]]);
}

/// The crates of the workspace and the crates of ours each may depend on (docs/development.md,
/// "Layers"): the binary -> admin / homes-api / reconciler -> model -> api, directory -> api
/// (admin also calls directory and the reconciler's plan); testenv
/// is for tests, benchmarks and `just up` alone, never a dependency of a shipped crate.
const CRATES: [(&str, &[&str]); 8] = [
    ("api", &[]),
    ("model", &["api"]),
    ("directory", &["api"]),
    ("reconciler", &["api", "model"]),
    ("homes-api", &["api", "model"]),
    ("admin", &["api", "model", "reconciler", "directory"]),
    (
        "operator",
        &[
            "api",
            "model",
            "reconciler",
            "directory",
            "homes-api",
            "admin",
        ],
    ),
    ("testenv", &["api"]),
];

/// The longest a function outside tests may be, in lines of code (comments and blank lines
/// included, doc comments above it not).
const LONGEST_FUNCTION: usize = 80;

/// Our crates `manifest` (a Cargo.toml) names under `[dependencies]` (not dev-dependencies).
fn our_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut section = "";
    let mut found = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]"
            && let Some(name) = line.strip_prefix("homestead-")
        {
            let name = name.split([' ', '=']).next();
            found.insert(name.unwrap_or_default().to_owned());
        }
    }
    found
}

#[test]
fn each_crate_depends_only_on_the_crates_below_it() {
    let root = workspace().join("crates");
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(&root).expect("crates/") {
        let dir = entry.expect("an entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let allowed = CRATES
            .iter()
            .find(|(c, _)| *c == name)
            .unwrap_or_else(|| panic!("crate {name} is not in CRATES"))
            .1;
        for dependency in our_dependencies(&manifest) {
            println!("{name} -> {dependency}");
            if !allowed.contains(&dependency.as_str()) {
                wrong.push(format!("{name} depends on {dependency}"));
            }
        }
        seen.insert(name);
    }
    assert_eq!(seen.len(), CRATES.len(), "every crate of CRATES exists");
    assert!(
        wrong.is_empty(),
        "dependencies upward:\n{}",
        wrong.join("\n")
    );
}

/// The functions in `source` outside `#[cfg(test)]` modules, each as (name, lines from its
/// `fn` line to its closing brace).
fn functions(source: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && let Some(next) = lines.get(at + 1)
            && next.trim_start().contains("mod ")
            && next.trim_end().ends_with('{')
        {
            let end = format!("{}}}", &next[..next.len() - next.trim_start().len()]);
            at += 2;
            while at < lines.len() && lines[at] != end {
                at += 1;
            }
            at += 1;
            continue;
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let fn_at = words.iter().position(|w| *w == "fn");
        let is_fn = fn_at.is_some_and(|i| {
            words[..i]
                .iter()
                .all(|w| ["pub", "pub(crate)", "async", "const", "unsafe"].contains(w))
        });
        if is_fn && !trimmed.ends_with(';') {
            let name = words[fn_at.unwrap_or_default() + 1];
            let name = name.split(['(', '<']).next().unwrap_or_default().to_owned();
            let opens = line.matches('{').count();
            let length = if opens > 0 && opens == line.matches('}').count() {
                1
            } else {
                let end = format!("{}}}", &line[..line.len() - trimmed.len()]);
                let last = (at..lines.len()).find(|&i| lines[i] == end).unwrap_or(at);
                last - at + 1
            };
            out.push((name, length));
        }
        at += 1;
    }
    out
}

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let mut longest = Vec::new();
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    for file in files {
        let relative = file.strip_prefix(workspace()).expect("under the workspace");
        let text = relative.to_string_lossy();
        if !text.contains("/src/") || text.ends_with("mock_tests.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("a source file");
        for (name, length) in functions(&source) {
            longest.push((length, format!("{text}: {name}")));
        }
    }
    longest.sort_by(|a, b| b.cmp(a));
    for (length, function) in longest.iter().take(5) {
        println!("{length:4} {function}");
    }
    let over: Vec<String> = longest
        .iter()
        .filter(|(length, _)| *length > LONGEST_FUNCTION)
        .map(|(length, function)| format!("{function}: {length} lines"))
        .collect();
    assert!(
        over.is_empty(),
        "functions over {LONGEST_FUNCTION} lines:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_function_reader_measures_bodies_and_skips_tests() {
    let source = "fn one() {}\npub async fn two(\n    a: u8,\n) -> u8 {\n    a\n}\nfn decl();\n#[cfg(test)]\nmod tests {\n    fn hidden() {\n    }\n}\n    pub(crate) fn inner() {\n        x\n    }\n";
    assert_eq!(
        functions(source),
        [
            ("one".to_owned(), 1),
            ("two".to_owned(), 5),
            ("inner".to_owned(), 3)
        ]
    );
}
