//! Directed graphs of named nodes: their strongly connected components and
//! their cycles.

use std::collections::{BTreeMap, BTreeSet};

/// Each node and the nodes it has an edge to.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The strongly connected components with more than one node (Tarjan),
/// each sorted; a self-loop is no cycle.
pub fn components(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue; // an edge out of the graph
            };
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.low[v].min(s.low[w.as_str()]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w.as_str()) {
                let low = s.low[v].min(s.index[w.as_str()]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}

/// The elementary cycles of a component (Johnson), each from its least
/// node, shortest first; at most `limit`, and whether there are more.
pub fn cycles_in(graph: &Graph, component: &[String], limit: usize) -> (Vec<Vec<String>>, bool) {
    struct Search<'g> {
        graph: &'g Graph,
        allowed: BTreeSet<&'g str>,
        start: &'g str,
        blocked: BTreeSet<&'g str>,
        blockers: BTreeMap<&'g str, BTreeSet<&'g str>>,
        path: Vec<&'g str>,
        out: Vec<Vec<String>>,
        limit: usize,
    }
    fn unblock<'g>(s: &mut Search<'g>, v: &'g str) {
        s.blocked.remove(v);
        for w in s.blockers.remove(v).unwrap_or_default() {
            if s.blocked.contains(w) {
                unblock(s, w);
            }
        }
    }
    fn circuit<'g>(s: &mut Search<'g>, v: &'g str) -> bool {
        let mut found = false;
        s.path.push(v);
        s.blocked.insert(v);
        let next: Vec<&'g str> = s
            .graph
            .get(v)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|w| s.allowed.contains(w))
            .collect();
        for &w in &next {
            if s.out.len() > s.limit {
                break;
            }
            if w == s.start {
                s.out.push(s.path.iter().map(|n| (*n).to_owned()).collect());
                found = true;
            } else if !s.blocked.contains(w) && circuit(s, w) {
                found = true;
            }
        }
        if found {
            unblock(s, v);
        } else {
            for w in next {
                s.blockers.entry(w).or_default().insert(v);
            }
        }
        s.path.pop();
        found
    }
    let mut sorted: Vec<&str> = component.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let mut search = Search {
        graph,
        allowed: sorted.iter().copied().collect(),
        start: "",
        blocked: BTreeSet::new(),
        blockers: BTreeMap::new(),
        path: Vec::new(),
        out: Vec::new(),
        limit,
    };
    for start in sorted {
        if search.out.len() > limit {
            break;
        }
        search.start = start;
        search.blocked.clear();
        search.blockers.clear();
        circuit(&mut search, start);
        search.allowed.remove(start);
    }
    let mut out = search.out;
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    let more = out.len() > limit;
    out.truncate(limit);
    (out, more)
}

/// For each edge of a component, the shortest cycle through it (breadth
/// first back to its start), each once, from its least node, shortest
/// first: every edge that makes the component, in a cycle one can read.
pub fn covering_cycles(graph: &Graph, component: &[String]) -> Vec<Vec<String>> {
    let inside: BTreeSet<&str> = component.iter().map(String::as_str).collect();
    let mut out: BTreeSet<(usize, Vec<String>)> = BTreeSet::new();
    for from in component {
        for to in graph
            .get(from)
            .into_iter()
            .flatten()
            .filter(|t| inside.contains(t.as_str()))
        {
            // Shortest path to -> from.
            let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([to.as_str()]);
            parent.insert(to, to);
            while let Some(v) = queue.pop_front() {
                if v == from {
                    break;
                }
                for w in graph
                    .get(v)
                    .into_iter()
                    .flatten()
                    .filter(|w| inside.contains(w.as_str()))
                {
                    if !parent.contains_key(w.as_str()) {
                        parent.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            if !parent.contains_key(from.as_str()) {
                continue; // not in one component after all
            }
            // Back from `from` to `to`, then reversed: to, …, from.
            let mut back = vec![from.as_str()];
            while let Some(&v) = back.last() {
                if v == to.as_str() {
                    break;
                }
                back.push(parent[v]);
            }
            back.reverse();
            back.pop();
            // from -> to -> … -> (from)
            let cycle: Vec<String> = std::iter::once(from.as_str())
                .chain(back)
                .map(str::to_owned)
                .collect();
            let least = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, n)| *n)
                .map_or(0, |(i, _)| i);
            let mut rotated = cycle[least..].to_vec();
            rotated.extend_from_slice(&cycle[..least]);
            out.insert((rotated.len(), rotated));
        }
    }
    out.into_iter().map(|(_, c)| c).collect()
}

/// `a -> b -> a`.
pub fn show(cycle: &[String]) -> String {
    let mut nodes: Vec<&str> = cycle.iter().map(String::as_str).collect();
    if let Some(first) = cycle.first() {
        nodes.push(first);
    }
    nodes.join(" -> ")
}
