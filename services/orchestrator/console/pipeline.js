// The pipeline form's text: JSON, or the YAML of `baton pipeline FILE`
// (deploy/config/pipelines/*.yaml), read by a small YAML subset parser
// (block maps and lists, `[a, b]` and `{k: v}` flow collections, quoted
// and plain scalars, `|` and `>` block text, comments). Either the file's
// form (`mode: dag`, `input_from`, ...) or a RunPipelineRequest in proto
// JSON (`{"pipeline": {...}, "initialSlots": {...}}`) becomes the request.

export const EXAMPLE = `# research → two analysts in parallel → writer
name: research-report
mode: dag
policy: continue
max_concurrency: 4
initial_slots:
  topic: the history of Rust
steps:
  - id: research
    agent: researcher
    task: "{{topic}}"
    output_to: notes
  - id: economics
    agent: analyst
    task: The economic angle.
    input_from: [notes]
    output_to: economics
  - id: people
    agent: analyst
    task: The people angle.
    input_from: [notes]
    output_to: people
    retries: 1
  - id: report
    agent: writer
    task: "Economics: {{economics}} People: {{people}}"
    output_to: report
`;

/** Parses JSON or YAML-subset text; throws Error with the line. */
export function parseDoc(text) {
  const t = text.trim();
  if (!t) throw new Error('the pipeline is empty');
  if (t.startsWith('{')) {
    try {
      return JSON.parse(t);
    } catch (e) {
      throw new Error(`not valid JSON: ${e.message}`);
    }
  }
  return parseYaml(text);
}

// ---- YAML subset ------------------------------------------------------

export function parseYaml(text) {
  const raw = text.replace(/\t/g, '  ').split(/\r?\n/);
  const lines = [];
  raw.forEach((r, i) => {
    const body = stripComment(r);
    if (!body.trim() || body.trim() === '---') {
      lines.push({ n: i + 1, indent: -1, text: '', raw: r });
      return;
    }
    lines.push({ n: i + 1, indent: body.length - body.trimStart().length, text: body.trim(), raw: r });
  });
  const p = { lines, i: 0 };
  skipBlank(p);
  if (p.i >= lines.length) return {};
  const v = parseNode(p, lines[p.i].indent);
  skipBlank(p);
  if (p.i < lines.length) fail(lines[p.i], 'unexpected indentation');
  return v;
}

function fail(line, msg) {
  throw new Error(`line ${line.n}: ${msg}`);
}

function stripComment(s) {
  let q = '';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (q) {
      if (ch === q && !(q === '"' && s[i - 1] === '\\')) q = '';
    } else if (ch === '"' || ch === "'") {
      if (i === 0 || /[\s:[{,-]/.test(s[i - 1])) q = ch;
    } else if (ch === '#' && (i === 0 || /\s/.test(s[i - 1]))) {
      return s.slice(0, i).replace(/\s+$/, '');
    }
  }
  return s.replace(/\s+$/, '');
}

function skipBlank(p) {
  while (p.i < p.lines.length && p.lines[p.i].indent < 0) p.i++;
}

function isItem(text) {
  return text === '-' || text.startsWith('- ');
}

function parseNode(p, indent) {
  skipBlank(p);
  const line = p.lines[p.i];
  return isItem(line.text) ? parseList(p, indent) : parseMap(p, indent);
}

function parseList(p, indent) {
  const out = [];
  for (;;) {
    skipBlank(p);
    const line = p.lines[p.i];
    if (!line || line.indent !== indent || !isItem(line.text)) break;
    const rest = line.text.slice(1).trimStart();
    if (!rest) {
      p.i++;
      skipBlank(p);
      const next = p.lines[p.i];
      out.push(next && next.indent > indent ? parseNode(p, next.indent) : null);
    } else if (keyOf(rest)) {
      // `- key: value` opens a map whose keys line up with `key`.
      const inner = indent + (line.text.length - rest.length);
      p.lines[p.i] = { ...line, indent: inner, text: rest };
      out.push(parseMap(p, inner));
    } else {
      p.i++;
      out.push(scalar(rest, line));
    }
  }
  return out;
}

/** `[key, value-text]` when `text` is `key: value` (key plain or quoted). */
function keyOf(text) {
  const m = /^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s"'[{#-][^:]*?|-[^\s:][^:]*?)\s*:(?:\s+(.*))?$/.exec(text);
  if (!m) return null;
  let key = m[1];
  if (key.startsWith('"')) key = JSON.parse(key);
  else if (key.startsWith("'")) key = key.slice(1, -1).replace(/''/g, "'");
  return [key, m[2] === undefined ? '' : m[2]];
}

function parseMap(p, indent) {
  const out = {};
  for (;;) {
    skipBlank(p);
    const line = p.lines[p.i];
    if (!line || line.indent !== indent || isItem(line.text)) {
      if (line && line.indent > indent) fail(line, 'unexpected indentation');
      break;
    }
    const kv = keyOf(line.text);
    if (!kv) fail(line, `expected "key: value", found "${line.text}"`);
    const [key, rest] = kv;
    if (Object.prototype.hasOwnProperty.call(out, key)) fail(line, `"${key}" appears twice`);
    p.i++;
    if (/^[|>][+-]?$/.test(rest)) {
      out[key] = blockText(p, indent, rest);
    } else if (rest) {
      out[key] = scalar(rest, line);
    } else {
      skipBlank(p);
      const next = p.lines[p.i];
      if (next && next.indent > indent) out[key] = parseNode(p, next.indent);
      else if (next && next.indent === indent && isItem(next.text)) out[key] = parseList(p, indent);
      else out[key] = null;
    }
  }
  return out;
}

function blockText(p, indent, style) {
  const body = [];
  let inner = -1;
  while (p.i < p.lines.length) {
    const line = p.lines[p.i];
    const ind = line.raw.length - line.raw.trimStart().length;
    if (line.raw.trim() && ind <= indent) break;
    if (line.raw.trim() && inner < 0) inner = ind;
    body.push(line.raw.trim() ? line.raw.slice(inner) : '');
    p.i++;
  }
  while (body.length && !body[body.length - 1]) body.pop();
  let text = style[0] === '|' ? body.join('\n') : body.join('\n').replace(/([^\n])\n(?!\n)/g, '$1 ');
  if (!style.endsWith('-')) text += '\n';
  return text;
}

function scalar(text, line) {
  const t = text.trim();
  if (t.startsWith('"')) {
    try {
      return JSON.parse(t);
    } catch {
      fail(line, `bad double-quoted string ${t}`);
    }
  }
  if (t.startsWith("'")) {
    if (!t.endsWith("'") || t.length < 2) fail(line, `bad single-quoted string ${t}`);
    return t.slice(1, -1).replace(/''/g, "'");
  }
  if (t.startsWith('[') || t.startsWith('{')) return flow(t, line);
  if (t === 'true') return true;
  if (t === 'false') return false;
  if (t === 'null' || t === '~') return null;
  if (/^-?\d+(\.\d+)?$/.test(t)) return Number(t);
  return t;
}

/** A flow collection: `[a, "b c", 3]`, `{k: v, k2: [x]}`. */
function flow(text, line) {
  let i = 0;
  const ws = () => {
    while (i < text.length && /\s/.test(text[i])) i++;
  };
  const value = () => {
    ws();
    const ch = text[i];
    if (ch === '[') {
      i++;
      const out = [];
      ws();
      if (text[i] === ']') {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === ']') {
          i++;
          return out;
        } else fail(line, `expected , or ] in ${text}`);
      }
    }
    if (ch === '{') {
      i++;
      const out = {};
      ws();
      if (text[i] === '}') {
        i++;
        return out;
      }
      for (;;) {
        ws();
        const k = atom(':');
        if (text[i] !== ':') fail(line, `expected : in ${text}`);
        i++;
        out[k] = value();
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === '}') {
          i++;
          return out;
        } else fail(line, `expected , or } in ${text}`);
      }
    }
    return atom('');
  };
  const atom = (stop) => {
    ws();
    if (text[i] === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const s = JSON.parse(text.slice(i, j + 1));
      i = j + 1;
      return s;
    }
    if (text[i] === "'") {
      let j = i + 1;
      for (;;) {
        if (j >= text.length) fail(line, `unterminated string in ${text}`);
        if (text[j] === "'" && text[j + 1] === "'") j += 2;
        else if (text[j] === "'") break;
        else j++;
      }
      const s = text.slice(i + 1, j).replace(/''/g, "'");
      i = j + 1;
      return s;
    }
    let j = i;
    while (j < text.length && !',]}'.includes(text[j]) && !(stop && text[j] === stop)) j++;
    const s = text.slice(i, j).trim();
    i = j;
    return stop ? s : scalar(s, line);
  };
  const v = value();
  ws();
  if (i < text.length) fail(line, `unexpected "${text.slice(i)}"`);
  return v;
}

// ---- to a RunPipelineRequest -------------------------------------------

const MODES = { sequential: 'PIPELINE_MODE_SEQUENTIAL', parallel: 'PIPELINE_MODE_PARALLEL', dag: 'PIPELINE_MODE_DAG' };
const POLICIES = { fail: 'FAILURE_POLICY_FAIL', continue: 'FAILURE_POLICY_CONTINUE', best_effort: 'FAILURE_POLICY_BEST_EFFORT' };

/** `a_b_c` → `aBC`. */
function camel(k) {
  return k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
}

function pick(obj, allowed, where) {
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw new Error(`${where || 'the pipeline'}: expected an object`);
  const out = {};
  for (const k of Object.keys(obj)) {
    const c = camel(k);
    if (!allowed.includes(c)) {
      const known = allowed.map((x) => (k.includes('_') || k === c ? x.replace(/[A-Z]/g, (m) => `_${m.toLowerCase()}`) : x));
      throw new Error(`${where ? `${where}.` : ''}${k}: unknown field (known: ${known.join(', ')})`);
    }
    out[c] = obj[k];
  }
  return out;
}

function enumOf(v, table, prefix, field) {
  if (v === undefined || v === null || v === '') return undefined;
  const s = String(v);
  if (s.startsWith(prefix)) return s;
  const e = table[s.toLowerCase()];
  if (!e) throw new Error(`${field}: "${s}" is not ${Object.keys(table).join(', ')}`);
  return e;
}

/** `30s`, `5m`, `1h`, `250ms`, `1m30s` or seconds as a number → proto JSON `"30s"`. */
export function durationOf(v, field) {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v === 'number') return `${v}s`;
  const s = String(v).trim();
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let total = 0;
  let used = 0;
  for (const m of s.matchAll(re)) {
    total += Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
    used += m[0].length;
  }
  if (!used || used !== s.length) throw new Error(`${field}: "${s}" is not a duration like 30s, 5m or 1h`);
  return `${Number(total.toFixed(3))}s`;
}

function strings(v, field) {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw new Error(`${field}: expected a list`);
  return v.map(String);
}

/**
 * The RunPipelineRequest (proto JSON) a parsed document describes: the
 * file form (`name`, `mode`, `steps`, `initial_slots`, ...) or a request
 * (`{pipeline, initialSlots, ...}`). Errors name the field.
 */
export function toRequest(doc) {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new Error('the pipeline must be an object');
  let req;
  let spec;
  if (doc.pipeline !== undefined) {
    req = pick(doc, ['pipeline', 'initialSlots', 'keepContext', 'runContextJson', 'defaultModel', 'limits', 'approvalMode', 'settings', 'detach', 'filter']);
    spec = pick(req.pipeline, ['name', 'steps', 'mode', 'policy', 'maxConcurrency'], 'pipeline');
  } else {
    const f = pick(doc, ['name', 'mode', 'policy', 'maxConcurrency', 'keepContext', 'initialSlots', 'steps']);
    spec = { name: f.name, steps: f.steps, mode: f.mode, policy: f.policy, maxConcurrency: f.maxConcurrency };
    req = { initialSlots: f.initialSlots, keepContext: f.keepContext };
  }
  if (!Array.isArray(spec.steps) || !spec.steps.length) throw new Error('steps: expected a list of at least one step');
  const pipeline = {
    name: spec.name ? String(spec.name) : '',
    mode: enumOf(spec.mode, MODES, 'PIPELINE_MODE_', 'mode'),
    policy: enumOf(spec.policy, POLICIES, 'FAILURE_POLICY_', 'policy'),
    maxConcurrency: spec.maxConcurrency === undefined || spec.maxConcurrency === null ? undefined : Number(spec.maxConcurrency),
    steps: spec.steps.map((raw, i) => {
      const where = `steps[${i}]`;
      const s = pick(raw, ['id', 'agent', 'task', 'inputFrom', 'outputTo', 'dependsOn', 'required', 'timeout', 'retries'], where);
      if (!s.id) throw new Error(`${where}.id: required`);
      if (!s.agent) throw new Error(`${where}.agent: required`);
      return {
        id: String(s.id),
        agent: String(s.agent),
        task: s.task === undefined || s.task === null ? '' : String(s.task),
        inputFrom: strings(s.inputFrom, `${where}.input_from`),
        outputTo: s.outputTo ? String(s.outputTo) : undefined,
        dependsOn: strings(s.dependsOn, `${where}.depends_on`),
        required: s.required === undefined || s.required === null ? undefined : !!s.required,
        timeout: durationOf(s.timeout, `${where}.timeout`),
        retries: s.retries === undefined || s.retries === null ? undefined : Number(s.retries),
      };
    }),
  };
  const slots = req.initialSlots;
  if (slots !== undefined && slots !== null && (typeof slots !== 'object' || Array.isArray(slots))) {
    throw new Error('initial_slots: expected a map of key: text');
  }
  const initialSlots = {};
  for (const k of Object.keys(slots || {})) initialSlots[k] = String(slots[k]);
  return JSON.parse(JSON.stringify({ ...req, pipeline, initialSlots, keepContext: req.keepContext ? true : undefined }));
}

/** What the graph needs of a request's pipeline, to keep with the run. */
export function graphSpec(request) {
  const p = request.pipeline;
  return {
    mode: p.mode || 'PIPELINE_MODE_SEQUENTIAL',
    steps: p.steps.map((s) => ({
      id: s.id, agent: s.agent, task: s.task || '', inputFrom: s.inputFrom || [], outputTo: s.outputTo || '', dependsOn: s.dependsOn || [],
    })),
  };
}

const SPECS = 'baton.pipelineSpecs';

/** Keeps the graph spec of a run this browser started (the newest 50). */
export function rememberSpec(runId, spec) {
  try {
    const all = JSON.parse(localStorage.getItem(SPECS) || '[]').filter((e) => e.runId !== runId);
    all.push({ runId, spec });
    localStorage.setItem(SPECS, JSON.stringify(all.slice(-50)));
  } catch {
    /* storage full or disabled: the graph is inferred */
  }
}

/** The graph spec of a run this browser started, or null. */
export function recallSpec(runId) {
  try {
    const e = JSON.parse(localStorage.getItem(SPECS) || '[]').find((x) => x.runId === runId);
    return e ? e.spec : null;
  } catch {
    return null;
  }
}
