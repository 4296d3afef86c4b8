package datakeys_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// Processes racing to create one key all get the one stored, whether
// their log is in the keys' database (the insert does not wait for its
// flush) or elsewhere.
func TestProcessesRacingToCreateAKeyGetTheSameOne(t *testing.T) {
	pool := pgtest.NewPool(t)
	box, _ := secretbox.New(bytes.Repeat([]byte{3}, 32))
	ctx := context.Background()
	rings := []*datakeys.Keyring{datakeys.New(pool, box), datakeys.New(pool, box, datakeys.SharesLog()), datakeys.New(pool, box, datakeys.SharesLog())}
	keys := make([]datakeys.Key, len(rings))
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := r.Ensure(ctx, "email-1", "acct")
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	sealed, err := keys[0].Seal([]byte("hello"), "ctx")
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys[1:] {
		if got, err := k.Open(sealed, "ctx"); err != nil || string(got) != "hello" {
			t.Errorf("keyring %d opened %q, %v", i+1, got, err)
		}
	}
	if _, err := keys[1].Open(sealed, "another context"); err == nil {
		t.Error("a ciphertext opened under another context")
	}
	// A process that never made the key finds the one stored.
	found, err := datakeys.New(pool, box).Lookup(ctx, "email-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := found["email-1"].Open(sealed, "ctx"); err != nil || string(got) != "hello" {
		t.Errorf("a fresh keyring opened %q, %v", got, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data_keys WHERE id = 'email-1' AND account_id = 'acct'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d key rows, %v", n, err)
	}
}

func TestADestroyedKeyIsGoneForEveryProcess(t *testing.T) {
	pool := pgtest.NewPool(t)
	box, _ := secretbox.New(bytes.Repeat([]byte{3}, 32))
	ctx := context.Background()
	a := datakeys.New(pool, box)
	if _, err := a.Ensure(ctx, "email-1", "acct"); err != nil {
		t.Fatal(err)
	}
	if err := a.Destroy(ctx, "email-1", "acct"); err != nil {
		t.Fatal(err)
	}
	if err := a.Destroy(ctx, "email-1", "acct"); err != nil {
		t.Fatalf("destroying twice: %v", err)
	}
	b := datakeys.New(pool, box) // a process that never saw the key
	got, err := b.Lookup(ctx, "email-1", "email-never")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := got["email-1"]; !ok || !k.Erased() {
		t.Errorf("destroyed key looked up as %v, %v", k, ok)
	}
	if _, ok := got["email-never"]; ok {
		t.Error("a key never created was found")
	}
	if _, err := b.Ensure(ctx, "email-1", "acct"); !errors.Is(err, datakeys.ErrErased) {
		t.Errorf("Ensure of a destroyed key: %v", err)
	}
	var wrapped *string
	if err := pool.QueryRow(ctx, `SELECT wrapped FROM data_keys WHERE id = 'email-1'`).Scan(&wrapped); err != nil || wrapped != nil {
		t.Errorf("the destroyed key's row still holds %v (%v)", wrapped, err)
	}
}

func TestAddressKeysIgnoreCaseAndDifferByAccount(t *testing.T) {
	k, err := datakeys.NewAddressKeys(bytes.Repeat([]byte{5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if k.Of("a", "Ann@Example.org") != k.Of("a", "ann@example.org") {
		t.Error("the same address in another case has another key")
	}
	if k.Of("a", "ann@example.org") == k.Of("b", "ann@example.org") {
		t.Error("two accounts share an address key")
	}
	other, _ := datakeys.NewAddressKeys(bytes.Repeat([]byte{6}, 32))
	if other.Of("a", "ann@example.org") == k.Of("a", "ann@example.org") {
		t.Error("the address key does not depend on the master key")
	}
}

// A process with another master key than the database's data keys were
// wrapped under is told so before it reads anything.
func TestCheckMasterKey(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	right, _ := secretbox.New(bytes.Repeat([]byte{3}, 32))
	wrong, _ := secretbox.New(bytes.Repeat([]byte{4}, 32))
	if err := datakeys.New(pool, wrong).CheckMasterKey(ctx); err != nil {
		t.Fatalf("no data keys yet: %v", err)
	}
	if _, err := datakeys.New(pool, right).Ensure(ctx, "email-1", "acct"); err != nil {
		t.Fatal(err)
	}
	if err := datakeys.New(pool, right).CheckMasterKey(ctx); err != nil {
		t.Fatalf("the key they were made with: %v", err)
	}
	if err := datakeys.New(pool, wrong).CheckMasterKey(ctx); !errors.Is(err, datakeys.ErrWrongMasterKey) {
		t.Fatalf("another key: %v", err)
	}
}

// The address keys of a database made before their secret was kept come
// from the master key its data keys open, whichever order the keys are
// given in while one replaces the other; once kept, the secret stays.
func TestAddressKeysOutliveTheMasterKey(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	first, second := bytes.Repeat([]byte{5}, 32), bytes.Repeat([]byte{6}, 32)
	box, _ := secretbox.New(first)
	if _, err := datakeys.New(pool, box).Ensure(ctx, "email-1", "acct"); err != nil { // an earlier release's database
		t.Fatal(err)
	}
	earlier, _ := datakeys.NewAddressKeys(first)
	want := earlier.Of("acct", "ann@example.org")

	during, _ := secretbox.New(first, second) // the new key given as previous first
	got, err := datakeys.New(pool, during).AddressKeys(ctx, first, second)
	if err != nil || got.Of("acct", "ann@example.org") != want {
		t.Fatalf("address keys while the new key is previous: %v", err)
	}
	after, _ := secretbox.New(second, first)
	if got, err := datakeys.New(pool, after).AddressKeys(ctx, second, first); err != nil || got.Of("acct", "ann@example.org") != want {
		t.Fatalf("address keys once the new key is current: %v", err)
	}
	if _, _, err := datakeys.New(pool, after).Rewrap(ctx); err != nil {
		t.Fatal(err)
	}
	alone, _ := secretbox.New(second)
	if got, err := datakeys.New(pool, alone).AddressKeys(ctx, second); err != nil || got.Of("acct", "ann@example.org") != want {
		t.Fatalf("address keys after the rewrap, with the new key alone: %v", err)
	}
}
