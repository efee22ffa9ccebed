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
  const bitLen = (x) => (x === 0n ? 0 : x.toString(2).length);
  const popcount = (x) => x.toString(2).split("").filter((c) => c === "1").length;
  const H0 = new Uint8Array([0]), H1 = new Uint8Array([1]);
  // An interior node's hash, kept by its exact input: neighbouring leaves climb the same
  // nodes, so a run's proofs cost about one digest per node instead of one per proof step.
  const nodeMemo = new Map();
  const node = (left, right) => {
    const input = cat(H1, left, right);
    const k = String.fromCharCode.apply(null, input);
    let got = nodeMemo.get(k);
    if (got === undefined) { got = sha(input); nodeMemo.set(k, got); }
    return got;
  };

  // transparency-dev/merkle's RootFromInclusionProof
  async function rootFromProof(index, size, leaf, proof) {
    index = BigInt(index); size = BigInt(size);
    if (index >= size) throw new Error(`leaf index ${index} is beyond the tree size ${size}`);
    const inner = bitLen(index ^ (size - 1n));
    const border = popcount(index >> BigInt(inner));
    if (proof.length !== inner + border) throw new Error(`proof has ${proof.length} hashes, want ${inner + border}`);
    let res = leaf;
    for (let i = 0; i < inner; i++) {
      res = ((index >> BigInt(i)) & 1n) === 0n ? await node(res, proof[i]) : await node(proof[i], res);
    }
    for (let i = inner; i < proof.length; i++) res = await node(proof[i], res);
    return res;
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
    // Every event is checked at once (its prev is the previous event's recorded hash, which
    // the previous event's own checks hold to account): WebCrypto runs the digests in
    // parallel, where one awaited digest after another costs a round trip each.
    const perEvent = await Promise.all(run.events.map(async (ev, i) => {
      const mine = [];
      const put = async (what, fn) => {
        try { const r = await fn(); mine.push({ run: rid, seq: ev.seq, what, ok: r === true, detail: r === true ? "holds" : r }); }
        catch (e) { mine.push({ run: rid, seq: ev.seq, what, ok: false, detail: String(e.message || e) }); }
      };
      let prev;
      try { prev = i === 0 ? genesis : unhex(run.events[i - 1].hash); } catch (e) { prev = new Uint8Array(32); }
      // the hash the leaf is built from: recomputed from the raw event when it is here
      let h = null;
      try { h = ev.raw !== null ? await sha(te.encode("tracevault/v1/event\0"), prev, b64(ev.raw)) : unhex(ev.hash); } catch (e) { h = null; }
      await put(ev.raw === null ? "link" : "chain", async () => {
        if (ev.seq !== i) return `seq ${ev.seq} at position ${i}: seqs are not contiguous from 0`;
        if (!eq(unhex(ev.prev), prev)) return "prev_hash is not the previous event's hash";
        if (h === null) return "the raw event is not base64";
        return eq(h, unhex(ev.hash)) ? true : "SHA-256 of the raw event is not its recorded hash";
      });
      await put("log inclusion", async () => {
        if (root === null) return "no verified checkpoint to prove against";
        if (h === null) return "no hash to prove";
        const got = await rootFromProof(ev.leaf_index, size, await sha(leafPrefix, u64(ev.seq), h), ev.proof.map((n) => b64(run.nodes[n])));
        return eq(got, root) ? true : "the proof does not lead to the checkpoint's root";
      });
      for (const part of ["request", "response"]) {
        const p = ev[part];
        if (p === null || p === undefined || ev.opened) continue;
        await put(part, async () => (ev.raw !== null && contains(b64(ev.raw), b64(p)) ? true : `the ${part} shown is not in the raw event`));
        const pre = document.getElementById(`${run.anchor}-seq-${ev.seq}-${part}`);
        if (pre) { try { pre.textContent = JSON.stringify(JSON.parse(new TextDecoder().decode(b64(p))), null, 2); } catch (e) { /* not JSON: left as rendered */ } }
      }
      return mine;
    }));
    for (const mine of perEvent) checks.push(...mine);
  }

  document.getElementById("tv-proofs").textContent = JSON.stringify(data, null, 1);
  // show: every check, a mark per event, and the words at the top
  const bad = checks.filter((c) => !c.ok);
  const label = (c) => `${c.run === null ? "" : c.run + " "}${c.seq === null ? "" : "seq " + c.seq + " "}${c.what}`;
  const status = document.getElementById("tv-browser-status");
  const keyless = keys.length === 0;
  status.dataset.state = bad.length === 0 ? "verified" : keyless ? "unverified" : "failed";
  status.className = "status " + (bad.length === 0 ? "ok" : "bad");
  status.textContent = bad.length === 0
    ? `Verified in this browser: ${checks.length} of ${checks.length} checks`
    : keyless
      ? `UNVERIFIED in this browser: this report holds no trusted log key, so ${bad.length} of ${checks.length} checks could not hold. First: ${label(bad[0])}: ${bad[0].detail}`
      : `FAILED in this browser: ${bad.length} of ${checks.length} checks failed. First: ${label(bad[0])}: ${bad[0].detail}`;
  const list = document.getElementById("tv-checks");
  for (const c of checks) {
    const li = document.createElement("li");
    li.className = "check " + (c.ok ? "ok" : "bad");
    li.dataset.run = c.run === null ? "" : c.run;
    li.dataset.seq = c.seq === null ? "" : String(c.seq);
    li.dataset.check = c.what;
    li.textContent = `${c.ok ? "PASS" : "FAIL"} ${label(c)}: ${c.detail}`;
    list.appendChild(li);
  }
  const bySeq = new Map();
  for (const c of checks) {
    if (c.seq === null) continue;
    const k = `${c.run}\n${c.seq}`;
    if (!bySeq.has(k)) bySeq.set(k, []);
    bySeq.get(k).push(c);
  }
  for (const run of data.runs) for (const ev of run.events) {
    const cell = document.getElementById(`${run.anchor}-seq-${ev.seq}-mark`);
    if (!cell) continue;
    const mine = bySeq.get(`${run.run_id}\n${ev.seq}`) || [];
    const failed = mine.filter((c) => !c.ok);
    cell.className = "mark " + (failed.length ? "bad" : "ok");
    cell.textContent = failed.length ? "FAILED: " + failed.map((c) => c.what).join(", ") : "verified: " + mine.map((c) => c.what).join(", ");
  }
  status.dataset.ms = String(Math.round(performance.now() - t0));  // bench/ui.py reads it
})().catch((e) => {
  const status = document.getElementById("tv-browser-status");
  status.dataset.state = "failed";
  status.className = "status bad";
  status.textContent = "FAILED in this browser: the verifier stopped: " + (e.message || e);
});
