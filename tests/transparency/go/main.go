// Command interop is the other side of tests/transparency/test_go_interop.py: Go's own
// implementations (golang.org/x/mod/sumdb/note, transparency-dev/formats/note,
// transparency-dev/merkle) check what tracevault writes, and produce what
// tracevault must accept. One JSON request on stdin, one JSON answer on stdout;
// any failure exits 1 with the reason on stderr.
package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"

	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"
)

type inclusion struct {
	Index    uint64   `json:"index"`
	Size     uint64   `json:"size"`
	LeafHash []byte   `json:"leaf_hash"`
	Proof    [][]byte `json:"proof"`
	Root     []byte   `json:"root"`
}

type consistency struct {
	Size1 uint64   `json:"size1"`
	Size2 uint64   `json:"size2"`
	Root1 []byte   `json:"root1"`
	Root2 []byte   `json:"root2"`
	Proof [][]byte `json:"proof"`
}

type request struct {
	Op           string        `json:"op"`
	Note         string        `json:"note"`
	VKeys        []string      `json:"vkeys"`
	WitnessVKeys []string      `json:"witness_vkeys"`
	Inclusion    []inclusion   `json:"inclusion"`
	Consistency  []consistency `json:"consistency"`
	Leaves       [][]byte      `json:"leaves"`
	Name         string        `json:"name"`
	WitnessName  string        `json:"witness_name"`
	Text         string        `json:"text"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fail("bad request: %v", err)
	}
	var out any
	switch req.Op {
	case "open":
		out = openNote(req)
	case "proofs":
		out = verifyProofs(req)
	case "tree":
		out = tree(req)
	case "sign":
		out = sign(req)
	default:
		fail("unknown op %q", req.Op)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("write: %v", err)
	}
}

// openNote verifies a signed note: log keys with x/mod's note, witness keys
// with transparency-dev's cosignature/v1 verifier.
func openNote(req request) any {
	var vs []note.Verifier
	for _, k := range req.VKeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			fail("log vkey %q: %v", k, err)
		}
		vs = append(vs, v)
	}
	for _, k := range req.WitnessVKeys {
		v, err := fnote.NewVerifierForCosignatureV1(k)
		if err != nil {
			fail("witness vkey %q: %v", k, err)
		}
		vs = append(vs, v)
	}
	n, err := note.Open([]byte(req.Note), note.VerifierList(vs...))
	if err != nil {
		fail("note.Open: %v", err)
	}
	type sig struct {
		Name string `json:"name"`
		Hash uint32 `json:"hash"`
	}
	var sigs []sig
	for _, s := range n.Sigs {
		sigs = append(sigs, sig{s.Name, s.Hash})
	}
	return map[string]any{"text": n.Text, "verified": sigs}
}

func verifyProofs(req request) any {
	for _, p := range req.Inclusion {
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, p.Size, p.LeafHash, p.Proof, p.Root); err != nil {
			fail("inclusion of %d in %d: %v", p.Index, p.Size, err)
		}
	}
	for _, p := range req.Consistency {
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, p.Size1, p.Size2, p.Proof, p.Root1, p.Root2); err != nil {
			fail("consistency %d to %d: %v", p.Size1, p.Size2, err)
		}
	}
	return map[string]any{"inclusion": len(req.Inclusion), "consistency": len(req.Consistency)}
}

// tree builds the RFC 6962 tree of the given leaf data with transparency-dev's
// reference tree: every root, every inclusion proof in the full tree, every
// consistency proof to the full tree.
func tree(req request) any {
	t := testonly.New(rfc6962.DefaultHasher)
	t.AppendData(req.Leaves...)
	n := t.Size()
	roots := make([][]byte, 0, n+1)
	for s := uint64(0); s <= n; s++ {
		roots = append(roots, t.HashAt(s))
	}
	incl := make([][][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		p, err := t.InclusionProof(i, n)
		if err != nil {
			fail("inclusion proof %d: %v", i, err)
		}
		incl = append(incl, p)
	}
	cons := make([][][]byte, 0, n+1)
	for m := uint64(0); m <= n; m++ {
		p, err := t.ConsistencyProof(m, n)
		if err != nil {
			fail("consistency proof %d: %v", m, err)
		}
		cons = append(cons, p)
	}
	return map[string]any{"roots": roots, "inclusion": incl, "consistency": cons}
}

// sign makes a fresh log key and witness key with Go, signs text with the log
// key (x/mod note) and cosigns it (cosignature/v1, transparency-dev formats).
func sign(req request) any {
	skey, vkey, err := note.GenerateKey(rand.Reader, req.Name)
	if err != nil {
		fail("GenerateKey: %v", err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		fail("NewSigner: %v", err)
	}
	wskey, wvkey, err := note.GenerateKey(rand.Reader, req.WitnessName)
	if err != nil {
		fail("GenerateKey: %v", err)
	}
	cosigner, err := fnote.NewSignerForCosignatureV1(wskey)
	if err != nil {
		fail("NewSignerForCosignatureV1: %v", err)
	}
	cvkey, err := fnote.VKeyToCosignatureV1(wvkey)
	if err != nil {
		fail("VKeyToCosignatureV1: %v", err)
	}
	msg, err := note.Sign(&note.Note{Text: req.Text}, signer, cosigner)
	if err != nil {
		fail("note.Sign: %v", err)
	}
	return map[string]any{"note": string(msg), "vkey": vkey, "skey": skey, "witness_vkey": cvkey}
}
