// Verifies a tracevault bundle's C2SP tlog-proof with Go's own implementations only:
// github.com/transparency-dev/formats/proof reads the file, golang.org/x/mod/sumdb/note
// opens its checkpoint with the log's vkey, and github.com/transparency-dev/merkle checks the
// inclusion proof of the leaf against the checkpoint's root.
//
// Usage: go_tlogproof VKEY PROOF_FILE LEAF_HASH_HEX
// Prints "ok <origin> <size> <index>" or exits 1 with the reason.
package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/transparency-dev/formats/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	mproof "github.com/transparency-dev/merkle/proof"
	"golang.org/x/mod/sumdb/note"
)

func fail(format string, args ...any) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	vkey, path, leafHex := os.Args[1], os.Args[2], os.Args[3]
	data, err := os.ReadFile(path)
	if err != nil {
		fail("read: %v", err)
	}
	var p proof.TLogProof
	if err := p.Unmarshal(data); err != nil {
		fail("tlog-proof: %v", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		fail("vkey: %v", err)
	}
	n, err := note.Open(p.Checkpoint, note.VerifierList(v))
	if err != nil {
		fail("checkpoint: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		fail("size: %v", err)
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil {
		fail("root: %v", err)
	}
	leaf, err := hex.DecodeString(leafHex)
	if err != nil {
		fail("leaf: %v", err)
	}
	hashes := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		hashes[i] = p.Hashes[i][:]
	}
	if err := mproof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, size, leaf, hashes, root); err != nil {
		fail("inclusion: %v", err)
	}
	fmt.Printf("ok %s %d %d\n", lines[0], size, p.Index)
}
