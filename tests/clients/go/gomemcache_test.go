// Go's github.com/bradfitz/gomemcache (text protocol) against the real cairn binary, started
// with its defaults on free ports: get_multi, cas, incr/decr, touch, large values, a value
// with every byte 0-255, delete, add/replace/append/prepend.
//
//	CAIRN_BIN=target/debug/cairn go test -v ./...
//
// CLIENT_TEST_ADDR=HOST:PORT runs the cases against a server already running instead (a real
// memcached, to compare).
//
// A case that fails because of a cairn bug stays, listed in knownServerBugs with its reason:
// it is run, its failure logged, and it fails the suite only once it passes (so the entry gets
// removed when the bug is fixed).
package clients

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// knownServerBugs: case name -> why it fails today (the cairn bug). Empty when none.
var knownServerBugs = map[string]string{}

var addr string

// TestMain starts `cairn -p 0 --data-dir <fresh>`: cairn's defaults
// (sync persistence, 64 MiB, 1 MiB items, no admin) on free ports, ready once it prints
// "cairn listening on ADDR".
func TestMain(m *testing.M) {
	if addr = os.Getenv("CLIENT_TEST_ADDR"); addr != "" { // a server already running (memcached, to compare)
		if err := memcache.New(addr).FlushAll(); err != nil {
			panic(err)
		}
		os.Exit(m.Run())
	}
	bin := os.Getenv("CAIRN_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "CAIRN_BIN: path of the cairn binary")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "cairn-gomemcache-")
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(bin, "-p", "0", "--data-dir", dir)
	stdout, _ := cmd.StdoutPipe()
	if os.Getenv("CAIRN_LOG") != "" { // the server's log, when asked for
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "cairn listening on "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		fmt.Fprintln(os.Stderr, "cairn exited before it was ready")
		os.Exit(1)
	}
	go func() { // keep draining its stdout
		for lines.Scan() {
		}
	}()
	code := m.Run()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	os.RemoveAll(dir)
	os.Exit(code)
}

// check collects a case's failures so that a known server bug can be reported, not failed.
type check struct {
	t    *testing.T
	errs []string
}

func (c *check) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *check) nilErr(what string, err error) {
	if err != nil {
		c.errorf("%s: %v", what, err)
	}
}

func (c *check) isErr(what string, err, want error) {
	if !errors.Is(err, want) {
		c.errorf("%s: got error %v, want %v", what, err, want)
	}
}

func run(t *testing.T, name string, body func(c *check, mc *memcache.Client)) {
	t.Run(name, func(t *testing.T) {
		mc := memcache.New(addr)
		mc.Timeout = 20 * time.Second // sync persistence on a shared disk: a megabyte write may take a while
		defer mc.Close()
		c := &check{t: t}
		body(c, mc)
		why, known := knownServerBugs[name]
		switch {
		case known && len(c.errs) > 0:
			t.Logf("expected failure (server bug: %s):\n  %s", why, strings.Join(c.errs, "\n  "))
		case known:
			t.Errorf("passes now: remove %q from knownServerBugs", name)
		case len(c.errs) > 0:
			t.Errorf("%s", strings.Join(c.errs, "\n"))
		}
	})
}

func set(c *check, mc *memcache.Client, key, value string) {
	c.nilErr("set "+key, mc.Set(&memcache.Item{Key: key, Value: []byte(value)}))
}

func getIs(c *check, mc *memcache.Client, key, want string) {
	it, err := mc.Get(key)
	if err != nil {
		c.errorf("get %s: %v", key, err)
		return
	}
	if string(it.Value) != want {
		c.errorf("get %s: %q, want %q", key, it.Value, want)
	}
}

func TestGoMemcache(t *testing.T) {
	run(t, "get_multi", func(c *check, mc *memcache.Client) {
		var keys []string
		for i := 0; i < 120; i++ {
			keys = append(keys, fmt.Sprintf("gm:%d", i))
			if i < 100 {
				c.nilErr("set", mc.Set(&memcache.Item{Key: keys[i], Value: []byte(fmt.Sprint(i)), Flags: uint32(i)}))
			}
		}
		got, err := mc.GetMulti(keys)
		c.nilErr("get_multi", err)
		if len(got) != 100 {
			c.errorf("get_multi: %d items, want 100", len(got))
		}
		if it := got["gm:42"]; it == nil || string(it.Value) != "42" || it.Flags != 42 {
			c.errorf("get_multi gm:42: %+v", it)
		}
	})
	run(t, "cas", func(c *check, mc *memcache.Client) {
		set(c, mc, "cas:k", "v1")
		it, err := mc.Get("cas:k")
		c.nilErr("gets", err)
		if err != nil {
			return
		}
		stale := *it
		it.Value = []byte("v2")
		c.nilErr("cas with the current unique", mc.CompareAndSwap(it))
		stale.Value = []byte("v3")
		c.isErr("cas with a stale unique", mc.CompareAndSwap(&stale), memcache.ErrCASConflict)
		getIs(c, mc, "cas:k", "v2")
		c.nilErr("delete", mc.Delete("cas:k"))
		c.isErr("cas on a deleted key", mc.CompareAndSwap(it), memcache.ErrCacheMiss)
	})
	run(t, "incr_decr", func(c *check, mc *memcache.Client) {
		set(c, mc, "n", "10")
		if v, err := mc.Increment("n", 5); err != nil || v != 15 {
			c.errorf("incr 5: %d %v, want 15", v, err)
		}
		if v, err := mc.Decrement("n", 20); err != nil || v != 0 {
			c.errorf("decr 20 (floors at 0): %d %v, want 0", v, err)
		}
		set(c, mc, "n", "18446744073709551615")
		if v, err := mc.Increment("n", 2); err != nil || v != 1 {
			c.errorf("incr past 2^64-1 (wraps): %d %v, want 1", v, err)
		}
		if _, err := mc.Increment("absent", 1); !errors.Is(err, memcache.ErrCacheMiss) {
			c.errorf("incr absent: %v, want cache miss", err)
		}
		set(c, mc, "text", "abc")
		if _, err := mc.Increment("text", 1); err == nil || !strings.Contains(err.Error(), "client error") {
			c.errorf("incr on a non-number: %v, want a client error", err)
		}
	})
	run(t, "touch", func(c *check, mc *memcache.Client) {
		c.nilErr("set ttl 1", mc.Set(&memcache.Item{Key: "t:k", Value: []byte("v"), Expiration: 1}))
		c.nilErr("touch 100", mc.Touch("t:k", 100))
		c.isErr("touch absent", mc.Touch("t:absent", 100), memcache.ErrCacheMiss)
		c.nilErr("set ttl 100", mc.Set(&memcache.Item{Key: "t:short", Value: []byte("v"), Expiration: 100}))
		c.nilErr("touch to 1", mc.Touch("t:short", 1))
		time.Sleep(2100 * time.Millisecond) // expiry has a one-second clock
		getIs(c, mc, "t:k", "v")
		if _, err := mc.Get("t:short"); !errors.Is(err, memcache.ErrCacheMiss) {
			c.errorf("get after touch to 1 s and 2 s: %v, want a miss", err)
		}
		it, err := mc.GetAndTouch("t:k", 50)
		if err != nil || string(it.Value) != "v" {
			c.errorf("gat: %v %v", it, err)
		}
	})
	run(t, "large_value", func(c *check, mc *memcache.Client) {
		big := bytes.Repeat([]byte("0123456789abcdef"), 1000000/16) // 1,000,000 bytes
		c.nilErr("set 1,000,000 bytes", mc.Set(&memcache.Item{Key: "big", Value: big}))
		if it, err := mc.Get("big"); err != nil || !bytes.Equal(it.Value, big) {
			c.errorf("get the 1,000,000-byte value back: err %v", err)
		}
		over := make([]byte, 1<<20+1) // just above the 1 MiB item limit
		err := mc.Set(&memcache.Item{Key: "over", Value: over})
		if err == nil {
			c.errorf("set 1 MiB + 1 bytes: stored, want a server error")
		} else if !strings.Contains(err.Error(), "SERVER_ERROR object too large for cache") {
			c.errorf("set 1 MiB + 1 bytes: %v, want SERVER_ERROR object too large for cache", err)
		}
		// The connection is still usable and the refused key is absent.
		if _, err := mc.Get("over"); !errors.Is(err, memcache.ErrCacheMiss) {
			c.errorf("get the refused key: %v, want a miss", err)
		}
		getIs(c, mc, "big", string(big))
	})
	run(t, "binary_value", func(c *check, mc *memcache.Client) {
		var v []byte
		for i := 0; i < 256; i++ {
			v = append(v, byte(i))
		}
		v = append(v, []byte("\r\nEND\r\n\x00")...)
		c.nilErr("set bytes 0-255", mc.Set(&memcache.Item{Key: "bin", Value: v, Flags: 0xffffffff}))
		it, err := mc.Get("bin")
		if err != nil || !bytes.Equal(it.Value, v) || it.Flags != 0xffffffff {
			c.errorf("get bytes 0-255: %v %+v", err, it)
		}
	})
	run(t, "delete", func(c *check, mc *memcache.Client) {
		set(c, mc, "d:k", "v")
		c.nilErr("delete", mc.Delete("d:k"))
		c.isErr("delete again", mc.Delete("d:k"), memcache.ErrCacheMiss)
		if _, err := mc.Get("d:k"); !errors.Is(err, memcache.ErrCacheMiss) {
			c.errorf("get deleted: %v", err)
		}
	})
	run(t, "add_replace_append_prepend", func(c *check, mc *memcache.Client) {
		c.nilErr("add new", mc.Add(&memcache.Item{Key: "s:k", Value: []byte("mid")}))
		c.isErr("add existing", mc.Add(&memcache.Item{Key: "s:k", Value: []byte("x")}), memcache.ErrNotStored)
		c.isErr("replace absent", mc.Replace(&memcache.Item{Key: "s:absent", Value: []byte("x")}), memcache.ErrNotStored)
		c.nilErr("append", mc.Append(&memcache.Item{Key: "s:k", Value: []byte(">")}))
		c.nilErr("prepend", mc.Prepend(&memcache.Item{Key: "s:k", Value: []byte("<")}))
		getIs(c, mc, "s:k", "<mid>")
		c.nilErr("replace existing", mc.Replace(&memcache.Item{Key: "s:k", Value: []byte("new")}))
		getIs(c, mc, "s:k", "new")
		c.isErr("append absent", mc.Append(&memcache.Item{Key: "s:absent", Value: []byte("x")}), memcache.ErrNotStored)
		c.isErr("prepend absent", mc.Prepend(&memcache.Item{Key: "s:absent", Value: []byte("x")}), memcache.ErrNotStored)
	})
}
