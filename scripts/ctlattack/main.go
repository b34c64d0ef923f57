// Command ctlattack runs control-socket attacks against a real fulcrumd (built in -bin)
// and prints what the daemon kept open and how much memory it took (docs/reliability.md,
// issue 26 item 9):
//
//	go run ./scripts/ctlattack -bin bin -n 3000 follow   # event streams
//	go run ./scripts/ctlattack -bin bin -n 1000 slowbody # bodies announced, never sent
//
// Each connection comes from this one process, as in the probe; a status call
// from another process shows whether a legitimate client still gets in.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/scripts/internal/throwaway"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding fulcrumd")
	n := flag.Int("n", 1000, "connections to open")
	wait := flag.Duration("wait", 35*time.Second, "slowbody: how long to wait before counting open connections")
	sock := flag.String("sock", "", "with the status command: the control socket (used by the attacks themselves)")
	flag.Parse()
	if flag.Arg(0) == "status" {
		// A legitimate client: another process.
		code, err := (&daemon{sock: *sock}).status()
		fmt.Println(code, err)
		return
	}
	d, err := start(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctlattack:", err)
		os.Exit(1)
	}
	defer d.stop()
	switch flag.Arg(0) {
	case "follow":
		err = follow(d, *n)
	case "slowbody":
		err = slowBody(d, *n, *wait)
	default:
		err = fmt.Errorf("unknown attack %q: follow or slowbody", flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctlattack:", err)
		d.stop()
		os.Exit(1)
	}
}

type daemon struct {
	*throwaway.Daemon
	sock string // the control socket
}

func start(bin string) (*daemon, error) {
	d := &daemon{}
	td, err := throwaway.Start(bin, "ctlattack", throwaway.Options{Ready: func(t *throwaway.Daemon) bool {
		d.sock = t.ControlSocket()
		code, _ := d.status()
		return code == http.StatusOK
	}})
	if err != nil {
		return nil, err
	}
	d.Daemon = td
	return d, nil
}

func (d *daemon) stop() { d.Stop() }

// rssMiB is fulcrumd's resident set (0 when unreadable).
func (d *daemon) rssMiB() float64 {
	v, _ := d.RSSMiB()
	return v
}

// status asks GET /v1/status on a fresh connection.
func (d *daemon) status() (int, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://fulcrum/v1/status")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// otherStatus asks GET /v1/status from another process.
func (d *daemon) otherStatus() (string, error) {
	out, err := exec.Command(os.Args[0], "-sock", d.sock, "status").Output()
	return strings.TrimSpace(string(out)), err
}

// open sends first on a new connection and returns it with the status line of the
// answer, if one came within a second ("" when none did).
func (d *daemon) open(first string) (net.Conn, string) {
	c, err := net.Dial("unix", d.sock)
	if err != nil {
		return nil, "dial: " + err.Error()
	}
	if _, err := io.WriteString(c, first); err != nil {
		return c, "write: " + err.Error()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return c, strings.TrimSpace(line)
}

func follow(d *daemon, n int) error {
	before := d.rssMiB()
	start := time.Now()
	counts := map[string]int{}
	var conns []net.Conn
	for range n {
		c, line := d.open("GET /v1/events?follow=1 HTTP/1.1\r\nHost: fulcrum\r\n\r\n")
		if c != nil {
			conns = append(conns, c)
		}
		counts[line]++
	}
	time.Sleep(2 * time.Second)
	after := d.rssMiB()
	code, err := d.otherStatus()
	fmt.Printf("follow: %d streams asked in %s; answers %v\n", n, time.Since(start).Round(time.Millisecond), counts)
	fmt.Printf("fulcrumd RSS %.1f -> %.1f MiB; a status call from another process: %s %v\n", before, after, code, err)
	for _, c := range conns {
		c.Close()
	}
	return nil
}

func slowBody(d *daemon, n int, wait time.Duration) error {
	before := d.rssMiB()
	var conns []net.Conn
	counts := map[string]int{}
	for range n {
		c, err := net.Dial("unix", d.sock)
		if err != nil {
			counts["dial error"]++
			continue
		}
		_, _ = io.WriteString(c, "PUT /v1/budgets HTTP/1.1\r\nHost: fulcrum\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{")
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	code, err := d.otherStatus()
	fmt.Printf("slowbody: %d connections, a status call from another process meanwhile: %s %v; RSS %.1f -> %.1f MiB\n", n, code, err, before, d.rssMiB())
	time.Sleep(wait)
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		_, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			open++
		}
		c.Close()
	}
	fmt.Printf("after %s: %d of %d still open (%v)\n", wait, open, len(conns), counts)
	return nil
}
