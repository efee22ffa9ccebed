// tracevault report: re-verifies the embedded evidence with WebCrypto (docs/desk.md).
// Chain: genesis = SHA-256("tracevault/v1/genesis\0" || run_id),
//        hash_n = SHA-256("tracevault/v1/event\0" || hash_(n-1) || raw_n).
// Leaf: SHA-256(0x00 || "tracevault/v1/leaf\0" || u16 len || run_id || u64 seq || hash_n),
// proven to the checkpoint's root per RFC 6962; the checkpoint is a C2SP signed note (Ed25519),
// cosignatures per C2SP tlog-cosignature.
"use strict";
(async function () {
  const t0 = performance.now();
  const te = new TextEncoder();
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const unhex = (s) => {
    if (!/^([0-9a-f]{2})*$/.test(s)) throw new Error("not hex");
    return Uint8Array.from(s.match(/../g) || [], (h) => parseInt(h, 16));
  };
  const cat = (...xs) => {
    const out = new Uint8Array(xs.reduce((n, x) => n + x.length, 0));
    let i = 0;
    for (const x of xs) { out.set(x, i); i += x.length; }
    return out;
  };
  const sha = async (...xs) => new Uint8Array(await crypto.subtle.digest("SHA-256", cat(...xs)));
  const eq = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
  const u64 = (n) => { const o = new Uint8Array(8); new DataView(o.buffer).setBigUint64(0, BigInt(n)); return o; };
  const contains = (hay, needle) => {
    outer: for (let i = 0; i + needle.length <= hay.length; i++) {
      for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
      return true;
    }
    return needle.length === 0;
  };
  const H0 = new Uint8Array([0]), H1 = new Uint8Array([1]);
  const pow2Below = (n) => { let k = 1; while (k * 2 < n) k *= 2; return k; };

  // The root that a run's leaf hashes (at their strictly increasing indexes, below n) and the
  // run's proof lead to (report.py's rangeproof.py): a walk of the tree from the left takes
  // a leaf where one lies, the proof's next hash for a subtree that holds none, and hashes
  // every node above the leaves itself (RFC 6962). Every node of a level is hashed at once.
  async function runRoot(indexes, leaves, n, given) {
    let k = 0, g = 0;
    const walk = (s, e) => {
      if (k >= indexes.length || indexes[k] >= e) {
        if (g >= given.length) throw new Error(`the run's proof has ${given.length} hashes: none is left for leaves ${s}..${e - 1}`);
        return Promise.resolve(given[g++]);
      }
      if (e - s === 1) return Promise.resolve(leaves[k++]);
      const m = s + pow2Below(e - s);
      const l = walk(s, m), r = walk(m, e);
      return Promise.all([l, r]).then(([a, b]) => sha(H1, a, b));
    };
    const root = walk(0, n);
    if (g !== given.length) throw new Error(`the run's proof has ${given.length} hashes, its leaves need ${g}`);
    return await root;
  }

  // Each event's "log inclusion" verdict (true or why not). The run's leaves are proven
  // together: with the hashes recomputed from the raw events, the root must be the signed
  // one. When it is not, the leaves whose recomputed hash differs from the chain's recorded
  // one are named (the root is computed again from the recorded hashes); failing that, the
  // proof or a hash the page cannot recompute was changed, and no leaf of the run is proven.
  async function inclusion(evs, hs, recorded, root, n, leafPrefix, given) {
    const out = evs.map(() => "no inclusion proof in this report");
    const idx = [];
    let lastLeaf = -1;
    evs.forEach((ev, i) => {
      const leaf = ev.leaf_index;
      if (leaf === null || leaf === undefined) return;
      if (!Number.isSafeInteger(leaf) || leaf < 0) out[i] = `leaf index ${leaf} is not a leaf index`;
      else if (leaf >= n) out[i] = `leaf index ${leaf} is beyond the tree size ${n}`;
      else if (leaf <= lastLeaf) out[i] = `leaf index ${leaf} does not follow the previous event's leaf ${lastLeaf}`;
      else { idx.push(i); lastLeaf = leaf; }
    });
    if (idx.length === 0) return out;
    if (typeof given === "string") { for (const i of idx) out[i] = given; return out; }
    const indexes = idx.map((i) => evs[i].leaf_index);
    const leavesOf = (hashes) => Promise.all(idx.map((i) => (hashes[i] === null ? new Uint8Array(32) : sha(leafPrefix, u64(evs[i].seq), hashes[i]))));
    const rootOf = async (hashes) => {
      try { return await runRoot(indexes, await leavesOf(hashes), n, given); } catch (e) { return String(e.message || e); }
    };
    const got = await rootOf(hs);
    if (typeof got !== "string" && eq(got, root)) { for (const i of idx) out[i] = true; return out; }
    const bad = new Set(idx.filter((i) => hs[i] === null || recorded[i] === null || !eq(hs[i], recorded[i])));
    if (bad.size > 0) {
      const again = await rootOf(recorded);
      if (typeof again !== "string" && eq(again, root)) {
        for (const i of idx) out[i] = bad.has(i) ? "the leaf of the hash recomputed from this event is not in the signed log" : true;
        return out;
      }
    }
    const why = typeof got === "string" ? got : "a hash of the run's proof, or a recorded hash the page cannot recompute, is not the one the log signed";
    for (const i of idx) out[i] = `the run's leaves do not lead to the checkpoint's root: ${why}`;
    return out;
  }

  async function parseVkey(text) {
    const [name, hexid, ...rest] = text.split("+");
    const blob = rest.join("+");
    const raw = b64(blob);
    const id = unhex(hexid);
    const want = (await sha(te.encode(name + "\n"), raw)).slice(0, 4);
    if (!eq(id, want)) throw new Error(`key id of ${name} does not match its key`);
    const key = await crypto.subtle.importKey("raw", raw.slice(1), { name: "Ed25519" }, false, ["verify"]);
    return { name, id, alg: raw[0], key };
  }

  function splitNote(note) {
    const cut = note.lastIndexOf("\n\n");
    if (cut < 0 || !note.endsWith("\n")) throw new Error("not a signed note");
    const text = note.slice(0, cut + 1);
    const sigs = note.slice(cut + 2, -1).split("\n").map((line) => {
      if (!line.startsWith("\u2014 ")) throw new Error("malformed signature line");
      const [name, blob] = line.slice(2).split(" ");
      const raw = b64(blob);
      return { name, id: raw.slice(0, 4), sig: raw.slice(4) };
    });
    return { text, sigs };
  }

  const checks = [];
  const add = (run, seq, what, ok, detail) => checks.push({ run, seq, what, ok, detail });
  const attempt = async (run, seq, what, fn) => {
    try { const r = await fn(); add(run, seq, what, r === true, r === true ? "holds" : r); }
    catch (e) { add(run, seq, what, false, String(e.message || e)); }
  };

  const data = JSON.parse(document.getElementById("tv-evidence").textContent);
  // What the writer left out because it follows from the event before (report.py's
  // _run_data): a leaf index one past the last, times as steps.
  for (const run of data.runs) {
    let at = 0, last = null, kind, step;
    run.events.forEach((ev, i) => {
      for (const [k, long] of [["h", "hash"], ["p", "prev"], ["i", "leaf_index"], ["o", "opened"], ["k", "kind"], ["t", "at"], ["n", "name"], ["q", "request"], ["r", "response"], ["qs", "request_sha"], ["rs", "response_sha"]]) {
        if (k in ev) { ev[long] = ev[k]; delete ev[k]; }
      }
      if (!("leaf_index" in ev)) ev.leaf_index = last === null || last.leaf_index === null ? null : last.leaf_index + 1;
      if (i < run.decoded) {  // a kind or a step left out is the last event's
        kind = ev.kind = ev.kind === undefined ? kind : ev.kind;
        step = ev.at === undefined ? step : ev.at;
        at += step;
        ev.micros = at;
      }
      last = ev;
    });
  }
  const keys = [], witnesses = [];
  for (const v of data.vkeys) await attempt(null, null, `trusted key ${v.split("+")[0]}`, async () => { keys.push(await parseVkey(v)); return true; });
  for (const v of data.witness_vkeys) await attempt(null, null, `witness key ${v.split("+")[0]}`, async () => { witnesses.push(await parseVkey(v)); return true; });

  for (const run of data.runs) {
    const rid = run.run_id;
    let root = null, size = null, text = null;
    await attempt(rid, null, "checkpoint signature", async () => {
      if (run.checkpoint === null) return "no signed checkpoint in this report";
      if (keys.length === 0) return "unverified: no trusted log key in this report";
      const note = splitNote(run.checkpoint);
      text = te.encode(note.text);
      const lines = note.text.slice(0, -1).split("\n");
      const cpSize = BigInt(lines[1]), cpRoot = b64(lines[2]);
      let good = 0;
      for (const s of note.sigs) for (const k of keys) {
        if (k.name !== s.name || !eq(k.id, s.id)) continue;
        if (!(await crypto.subtle.verify({ name: "Ed25519" }, k.key, s.sig, text))) return `signature of ${k.name} does not verify`;
        good++;
      }
      if (good === 0) return "no signature by a trusted log key";
      size = cpSize; root = cpRoot;
      return true;
    });
    if (witnesses.length > 0) await attempt(rid, null, "witness cosignatures", async () => {
      if (text === null) return "no checkpoint to cosign";
      let good = 0;
      for (const s of splitNote(run.checkpoint).sigs) for (const w of witnesses) {
        if (w.name !== s.name || !eq(w.id, s.id)) continue;
        const ts = new DataView(s.sig.buffer, s.sig.byteOffset).getBigUint64(0);
        const msg = cat(te.encode(`cosignature/v1\ntime ${ts}\n`), text);
        if (!(await crypto.subtle.verify({ name: "Ed25519" }, w.key, s.sig.slice(8), msg))) return `cosignature of ${w.name} does not verify`;
        good++;
      }
      return good >= data.min_witnesses ? true : `${good} trusted cosignatures, ${data.min_witnesses} required`;
    });
    const rid8 = te.encode(rid);
    const leafPrefix = cat(H0, te.encode("tracevault/v1/leaf\0"), new Uint8Array([rid8.length >> 8, rid8.length & 255]), rid8);
    const genesis = await sha(te.encode("tracevault/v1/genesis\0"), rid8);
    const evs = run.events;
    // Every event's hash at once (its prev is the previous event's recorded hash, which the
    // previous event's own checks hold to account): WebCrypto runs the digests in parallel.
    const recorded = evs.map((ev) => { try { return b64(ev.hash); } catch (e) { return null; } });
    const prevs = evs.map((ev, i) => (i === 0 ? genesis : recorded[i - 1] || new Uint8Array(32)));
    const raws = evs.map((ev) => { try { return ev.raw === null ? null : b64(ev.raw); } catch (e) { return undefined; } });
    const eventTag = te.encode("tracevault/v1/event\0");
    const hs = await Promise.all(evs.map((ev, i) => (raws[i] === null ? recorded[i] : raws[i] === undefined ? null : sha(eventTag, prevs[i], raws[i]))));
    let given;
    try { given = run.proof.map(b64); } catch (e) { given = "the run's proof is not base64"; }
    const incl = root === null ? null : await inclusion(evs, hs, recorded, root, Number(size), leafPrefix, given);
    evs.forEach((ev, i) => {
      const put = (what, fn) => {
        try { const r = fn(); checks.push({ run: rid, seq: ev.seq, what, ok: r === true, detail: r === true ? "holds" : r }); }
        catch (e) { checks.push({ run: rid, seq: ev.seq, what, ok: false, detail: String(e.message || e) }); }
      };
      const h = hs[i];
      put(ev.raw === null ? "link" : "chain", () => {
        if (ev.seq !== i) return `seq ${ev.seq} at position ${i}: seqs are not contiguous from 0`;
        if (ev.prev !== undefined && !eq(b64(ev.prev), prevs[i])) return "prev_hash is not the previous event's hash";
        if (h === null) return "the raw event is not base64";
        return recorded[i] !== null && eq(h, recorded[i]) ? true : "SHA-256 of the raw event is not its recorded hash";
      });
      put("log inclusion", () => (incl === null ? "no verified checkpoint to prove against" : incl[i]));
      ev.checked = {};
      for (const part of ["request", "response"]) {
        const p = ev[part];
        if (p === null || p === undefined || ev.opened) continue;
        put(part, () => {
          const raw = raws[i];
          if (raw === null) return `the ${part} shown is not in the raw event`;
          if (raw === undefined) return "the raw event is not base64";
          let bytes;
          if (Array.isArray(p)) {  // [offset, length] in the raw event: shown from there
            const [off, len] = p;
            if (!(Number.isInteger(off) && Number.isInteger(len) && off >= 0 && len >= 0 && off + len <= raw.length)) return `the ${part}'s place is outside the raw event`;
            bytes = raw.subarray(off, off + len);
          } else {
            bytes = b64(p);
            if (!contains(raw, bytes)) return `the ${part} shown is not in the raw event`;
          }
          ev.checked[part] = bytes;  // shown from these checked bytes only
          return true;
        });
      }
    });
  }

  const tChecked = performance.now();
  // the proofs as text only when the reader opens them (a 10,000-event run's are megabytes)
  const proofs = document.getElementById("tv-proofs");
  proofs.parentElement.addEventListener("toggle", () => { if (!proofs.textContent) proofs.textContent = JSON.stringify(data, null, 1); });
  // show: every check, a mark per event, and the words at the top
  const bad = checks.filter((c) => !c.ok);
  const label = (c) => `${c.run === null ? "" : c.run + " "}${c.seq === null ? "" : "seq " + c.seq + " "}${c.what}`;
  const status = document.getElementById("tv-browser-status");
  const keyless = keys.length === 0;
  const el = (tag, text, cls) => { const x = document.createElement(tag); if (text !== undefined) x.textContent = text; if (cls) x.className = cls; return x; };
  const bySeq = new Map();
  for (const c of checks) {
    if (c.seq === null) continue;
    const k = `${c.run}\n${c.seq}`;
    if (!bySeq.has(k)) bySeq.set(k, []);
    bySeq.get(k).push(c);
  }
  // the verdict first, in words at the top; then what backs it is drawn
  status.dataset.state = bad.length === 0 ? "verified" : keyless ? "unverified" : "failed";
  status.className = "status " + (bad.length === 0 ? "ok" : "bad");
  status.textContent = bad.length === 0
    ? `Verified in this browser: ${checks.length} of ${checks.length} checks`
    : keyless
      ? `UNVERIFIED in this browser: this report holds no trusted log key, so ${bad.length} of ${checks.length} checks could not hold. First: ${label(bad[0])}: ${bad[0].detail}`
      : `FAILED in this browser: ${bad.length} of ${checks.length} checks failed. First: ${label(bad[0])}: ${bad[0].detail}`;
  status.dataset.ms = String(Math.round(performance.now() - t0));  // bench/ui.py reads them
  status.dataset.checkMs = String(Math.round(tChecked - t0));
  const drawChecks = (from, to) => {
    const list = document.createDocumentFragment();
    for (const c of checks.slice(from, to)) {
      const li = el("li", `${c.ok ? "PASS" : "FAIL"} ${label(c)}: ${c.detail}`, "check " + (c.ok ? "ok" : "bad"));
      li.dataset.run = c.run === null ? "" : c.run;
      li.dataset.seq = c.seq === null ? "" : String(c.seq);
      li.dataset.check = c.what;
      list.appendChild(li);
    }
    document.getElementById("tv-checks").appendChild(list);
  };
  // the timeline, drawn from the evidence: a payload is shown only from the bytes checked
  // against the raw event above (or opened with the reader's key), else by its SHA-256
  const pretty = (bytes) => {
    const text = new TextDecoder().decode(bytes);
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  };
  const drawRows = (run, table, from, to) => {
    const rows = document.createDocumentFragment();
    for (const ev of run.events.slice(from, to)) {
      if (ev.kind === undefined) continue;  // not decoded: in the proofs by hash only
      const id = `${run.anchor}-seq-${ev.seq}`;
      const tr = el("tr");
      tr.id = id;
      const a = el("a", String(ev.seq));
      a.href = "#" + id;
      tr.appendChild(el("td")).appendChild(a);
      const next = run.events[ev.seq + 1];
      const took = next === undefined || next.micros === undefined ? "" : `${((next.micros - ev.micros) / 1000).toFixed(1)} ms`;
      // the column says UTC: "2026-09-21 14:13:20.005", kept on one line (class "at")
      const at = new Date(Math.floor(ev.micros / 1000)).toISOString().replace("T", " ").replace("Z", "");
      tr.appendChild(el("td", run.kinds[ev.kind]));
      tr.appendChild(el("td", at, "at"));
      for (const t of [took, ev.name || ""]) tr.appendChild(el("td", t));
      const mine = bySeq.get(`${run.run_id}\n${ev.seq}`) || [];
      const failed = mine.filter((c) => !c.ok);
      const mark = tr.appendChild(el("td", failed.length ? "FAILED: " + failed.map((c) => c.what).join(", ") : "verified: " + mine.map((c) => c.what).join(", "), "mark " + (failed.length ? "bad" : "ok")));
      mark.id = id + "-mark";
      const cell = tr.appendChild(el("td"));
      for (const part of ["request", "response"]) {
        const p = ev[part];
        if (p === undefined || p === null) {
          const div = cell.appendChild(el("div", `${part}: not revealed, SHA-256 `));
          div.appendChild(el("span", ev[part + "_sha"], "hash"));
          continue;
        }
        const bytes = ev.opened ? (Array.isArray(p) ? undefined : b64(p)) : (ev.checked || {})[part];
        if (bytes === undefined) { cell.appendChild(el("div", `${part}: not shown: it is not in the raw event`, "bad")); continue; }
        const det = cell.appendChild(el("details"));
        det.appendChild(el("summary", `${part} (${bytes.length} bytes)`));
        det.appendChild(el("pre", pretty(bytes))).id = `${id}-${part}`;
      }
      if (ev.opened) cell.appendChild(document.createTextNode(" (opened with the reader's key)"));
      rows.appendChild(tr);
    }
    table.appendChild(rows);
  };
  // Drawn a slice at a time: a small report at once (with its verdict), a large one's first
  // rows at once and the rest between frames, so the page answers while it fills.
  const slices = [];  // [items, draw]: the rows (the first screen) before the list of checks
  for (const run of data.runs) {
    const table = document.getElementById(`${run.anchor}-timeline`);
    if (table) for (let i = 0; i < run.events.length; i += 500) slices.push([Math.min(500, run.events.length - i), () => drawRows(run, table, i, i + 500)]);
  }
  for (let i = 0; i < checks.length; i += 2000) slices.push([Math.min(2000, checks.length - i), () => drawChecks(i, i + 2000)]);
  let budget = 1000;
  while (slices.length > 0 && budget >= slices[0][0]) { budget -= slices[0][0]; slices.shift()[1](); }
  const more = () => {
    if (slices.length === 0) { status.dataset.drawnMs = String(Math.round(performance.now() - t0)); return; }
    slices.shift()[1]();
    setTimeout(more, 0);
  };
  more();
})().catch((e) => {
  const status = document.getElementById("tv-browser-status");
  status.dataset.state = "failed";
  status.className = "status bad";
  status.textContent = "FAILED in this browser: the verifier stopped: " + (e.message || e);
});
