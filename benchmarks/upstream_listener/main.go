// Command upstream-listener serves upstream's watcher listener package for listener_bench's xfcc
// comparison (DESIGN.md §7: our listener in xfcc mode against the upstream Go listener, per core).
//
// The package is github.com/kyma-project/runtime-watcher/listener at the only version the Go module
// proxy serves here (the pseudo-version lifecycle-manager pinned in mid-2023; its newer v1.x
// releases are refused, see benchmarks/results/listener.md). That version takes a verify function;
// the one below does what today's listener does itself (listener/pkg/v2): take the first Cert=
// token of X-Forwarded-Client-Cert up to ';' or ',', URL-unescape it, trim quotes, PEM-decode and
// parse the x509 certificate, require a subject CN (the runtime id). The consumer stands in for
// lifecycle-manager's event source: it drains the unbuffered channel and looks the runtime up in an
// in-memory map (KLM lists Kymas by label from its informer cache), counting what it would enqueue.
// No logger is set, so the package's per-event log lines cost nothing (KLM logs them with zap).
package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/kyma-project/runtime-watcher/listener/pkg/event"
	"github.com/kyma-project/runtime-watcher/listener/pkg/types"
)

const maxXFCC = 32 * 1024

func runtimeID(header string) (string, error) {
	if header == "" {
		return "", errors.New("no X-Forwarded-Client-Cert header")
	}
	if len(header) > maxXFCC {
		return "", errors.New("X-Forwarded-Client-Cert too long")
	}
	start := strings.Index(header, "Cert=")
	if start < 0 {
		return "", errors.New("no Cert= token")
	}
	token := header[start+len("Cert="):]
	if end := strings.IndexAny(token, ";,"); end >= 0 {
		token = token[:end]
	}
	decoded, err := url.QueryUnescape(token)
	if err != nil {
		return "", fmt.Errorf("bad URL encoding: %w", err)
	}
	block, _ := pem.Decode([]byte(strings.Trim(decoded, `"`)))
	if block == nil {
		return "", errors.New("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	if cert.Subject.CommonName == "" {
		return "", errors.New("client certificate common name is empty")
	}
	return cert.Subject.CommonName, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "listen address")
	runtimes := flag.String("runtimes", "", "file with one known runtime id per line")
	flag.Parse()

	kymas := map[string]string{}
	if *runtimes != "" {
		file, err := os.Open(*runtimes)
		if err != nil {
			panic(err)
		}
		scanner := bufio.NewScanner(file)
		for scanner.Scan() {
			id := strings.TrimSpace(scanner.Text())
			kymas[id] = "kyma-" + id
		}
		_ = file.Close()
	}

	var unknown, verified atomic.Int64
	verify := func(r *http.Request, _ *types.WatchEvent) error {
		id, err := runtimeID(r.Header.Get("X-Forwarded-Client-Cert"))
		if err != nil {
			return err
		}
		if _, ok := kymas[id]; !ok {
			unknown.Add(1)
			return fmt.Errorf("no Kyma for runtime %q", id)
		}
		verified.Add(1)
		return nil
	}
	listener, _ := event.RegisterListenerComponent(*addr, "lifecycle-manager", verify)

	var received atomic.Int64
	queued := map[string]struct{}{}
	go func() {
		for evt := range listener.ReceivedEvents {
			received.Add(1)
			queued[evt.Object.GetNamespace()+"/"+evt.Object.GetName()] = struct{}{}
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := listener.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
	}
	fmt.Printf("received %d verified %d unknown %d queued %d\n",
		received.Load(), verified.Load(), unknown.Load(), len(queued))
}
