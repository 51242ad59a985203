// Command admission_client sends AdmissionReviews to a webhook the way kube-apiserver does: Go's
// net/http client over TLS with a small pool of keep-alive connections. It is the benchmarks'
// open-loop load client where a Python client's own scheduling would be part of the figure (see
// benchmarks/go_admission_client.py). Only the standard library: nothing to pin but Go itself.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"os"
	"sort"
	"sync"
	"time"
)

type summary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

type result struct {
	Mode         string         `json:"mode"`
	Client       string         `json:"client"`
	Requests     int            `json:"requests"`
	Measured     int            `json:"measured"`
	ElapsedS     float64        `json:"elapsed_s"`
	AchievedRPS  float64        `json:"achieved_rps"`
	Statuses     map[string]int `json:"statuses"`
	Errors       int            `json:"errors"`
	FromSchedule summary        `json:"from_schedule_ms"`
	FromWrite    summary        `json:"from_write_ms"`
}

// percentile matches benchmarks/stats.py: index round(q*(n-1)) of the sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.RoundToEven(q*float64(len(sorted)-1)))]
}

func summarize(values []float64) summary {
	sort.Float64s(values)
	total := 0.0
	for _, v := range values {
		total += v
	}
	s := summary{
		P50: percentile(values, 0.50), P90: percentile(values, 0.90), P99: percentile(values, 0.99),
		P999: percentile(values, 0.999),
	}
	if len(values) > 0 {
		s.Max = values[len(values)-1]
		s.Mean = total / float64(len(values))
	}
	return s
}

func main() {
	url := flag.String("url", "", "the webhook URL, e.g. https://127.0.0.1:9443/validate/lm")
	caFile := flag.String("ca", "", "PEM file of the CA that signed the webhook's certificate")
	bodiesFile := flag.String("bodies", "", "file with one AdmissionReview JSON document per line")
	rate := flag.Float64("rate", 500, "requests per second (open loop)")
	duration := flag.Float64("duration", 20, "seconds of measured load")
	warmup := flag.Float64("warmup", 2, "seconds of load before measuring")
	connections := flag.Int("connections", 8, "keep-alive connections (MaxConnsPerHost)")
	flag.Parse()
	if *url == "" || *caFile == "" || *bodiesFile == "" {
		fmt.Fprintln(os.Stderr, "admission_client: --url, --ca and --bodies are required")
		os.Exit(2)
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission_client:", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "admission_client: no certificate in", *caFile)
		os.Exit(2)
	}
	file, err := os.Open(*bodiesFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission_client:", err)
		os.Exit(2)
	}
	var bodies [][]byte
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		bodies = append(bodies, append([]byte(nil), scanner.Bytes()...))
	}
	file.Close()
	if len(bodies) == 0 {
		fmt.Fprintln(os.Stderr, "admission_client: no bodies in", *bodiesFile)
		os.Exit(2)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxConnsPerHost:     *connections,
		MaxIdleConnsPerHost: *connections,
		IdleConnTimeout:     90 * time.Second,
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	total := int(*rate * (*duration + *warmup))
	skip := int(*rate * *warmup)
	var mu sync.Mutex
	var wg sync.WaitGroup
	statuses := map[string]int{}
	errors := 0
	var fromSchedule, fromWrite []float64

	one := func(index int, target time.Time) {
		defer wg.Done()
		var wrote time.Time
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote = time.Now() }}
		request, _ := http.NewRequestWithContext(
			httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, *url,
			bytes.NewReader(bodies[index%len(bodies)]),
		)
		request.Header.Set("Content-Type", "application/json")
		response, err := client.Do(request)
		if err == nil {
			_, err = io.Copy(io.Discard, response.Body)
			response.Body.Close()
		}
		done := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errors++
			return
		}
		statuses[fmt.Sprint(response.StatusCode)]++
		if index >= skip {
			fromSchedule = append(fromSchedule, float64(done.Sub(target))/1e6)
			fromWrite = append(fromWrite, float64(done.Sub(wrote))/1e6)
		}
	}

	start := time.Now().Add(50 * time.Millisecond)
	interval := time.Duration(float64(time.Second) / *rate)
	for i := 0; i < total; i++ {
		target := start.Add(time.Duration(i) * interval)
		if wait := time.Until(target); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go one(i, target)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	out := result{
		Mode: "open", Client: "go-net/http", Requests: total, Measured: len(fromSchedule), ElapsedS: elapsed,
		AchievedRPS: float64(total) / elapsed, Statuses: statuses, Errors: errors,
		FromSchedule: summarize(fromSchedule), FromWrite: summarize(fromWrite),
	}
	encoded, _ := json.Marshal(out)
	fmt.Println(string(encoded))
}
