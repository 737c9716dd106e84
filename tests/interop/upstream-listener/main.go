// Command upstream-listener serves upstream's WatchEvent listener, the package
// github.com/kyma-project/runtime-watcher/listener at the version go.mod pins, so that the interop
// tests can send events from our runtime watcher to the real thing and see what it decoded.
//
// Upstream runs this listener inside lifecycle-manager behind an Istio gateway: the gateway ends the
// runtime's mutual TLS (the client certificate must chain to the watcher CA) and passes the verified
// certificate on in X-Forwarded-Client-Cert, where upstream's package reads the runtime id from. The
// package itself serves plain HTTP and verifies nothing. This program plays both parts in one process:
//
//	-listen    mutual TLS, the gateway's part: a client certificate signed by -ca is required, a
//	           X-Forwarded-Client-Cert sent by the client is dropped, and the verified certificate
//	           is forwarded the way Envoy writes it (Hash=<sha256>;Cert="<URL-encoded PEM>";Subject=...).
//	-upstream  loopback plain HTTP: upstream's SKREventListener.Start, unchanged, serving
//	           /v2/<component>/event.
//	-control   loopback plain HTTP for the tests: GET /healthz; GET /record, every request the
//	           gateway passed on (with upstream's answer) and every event upstream's listener
//	           emitted on its channel; POST /forward-client-cert?on=false|true, to make the gateway
//	           stop or resume forwarding the certificate (upstream then answers 401).
//
// It is ready (GET /healthz answers 200) once upstream's handler answers on its path. SIGTERM or
// SIGINT stops everything and exits 0.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/kyma-project/runtime-watcher/listener/pkg/v2/event"
	"github.com/kyma-project/runtime-watcher/listener/pkg/v2/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const clientCertHeader = "X-Forwarded-Client-Cert"

// Request is one request the gateway passed on, with upstream's answer.
type Request struct {
	Method   string `json:"method"`
	Path     string `json:"path"`
	ClientCN string `json:"clientCN"`
	Body     string `json:"body"`
	Status   int    `json:"status"`
	Answer   string `json:"answer"`
}

// Event is one event upstream's listener emitted, read back through the types it put in.
type Event struct {
	RuntimeID  string                  `json:"runtimeId"`
	Watched    types.ObjectKey         `json:"watched"`
	WatchedGvk metav1.GroupVersionKind `json:"watchedGvk"`
	// WatcherBody is json.Marshal of upstream's WatchEvent holding what the listener decoded: the
	// bytes upstream's own runtime watcher sends for that change (it marshals this same type).
	WatcherBody string `json:"watcherBody"`
	Problem     string `json:"problem,omitempty"`
}

type recorder struct {
	mu       sync.Mutex
	requests []Request
	events   []Event
	forward  bool
}

func (r *recorder) addRequest(req Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req)
}

func (r *recorder) addEvent(evt Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evt)
}

func (r *recorder) forwarding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.forward
}

func (r *recorder) setForwarding(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forward = on
}

func (r *recorder) snapshot() ([]Request, []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request{}, r.requests...), append([]Event{}, r.events...)
}

// decode reads an emitted event back through the Go types upstream's listener stored in it; a
// missing key or another type is reported as a problem rather than guessed around.
func decode(content map[string]any) Event {
	var evt Event
	var problems []string
	if id, ok := content["runtime-id"].(string); ok {
		evt.RuntimeID = id
	} else {
		problems = append(problems, fmt.Sprintf("runtime-id is %T", content["runtime-id"]))
	}
	if watched, ok := content["watched"].(types.ObjectKey); ok {
		evt.Watched = watched
	} else {
		problems = append(problems, fmt.Sprintf("watched is %T", content["watched"]))
	}
	if gvk, ok := content["watched-gvk"].(metav1.GroupVersionKind); ok {
		evt.WatchedGvk = gvk
	} else {
		problems = append(problems, fmt.Sprintf("watched-gvk is %T", content["watched-gvk"]))
	}
	body, err := json.Marshal(&types.WatchEvent{Watched: evt.Watched, WatchedGvk: evt.WatchedGvk})
	if err != nil {
		problems = append(problems, err.Error())
	}
	evt.WatcherBody = string(body)
	evt.Problem = strings.Join(problems, "; ")
	return evt
}

// percentEncode writes every byte outside RFC 3986's unreserved set as %XX, as Envoy encodes the
// PEM in X-Forwarded-Client-Cert (so '+', '/', '=', ';', ',' and '"' never appear raw).
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func clientCertValue(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	return fmt.Sprintf("Hash=%s;Cert=\"%s\";Subject=\"%s\"", hex.EncodeToString(sum[:]), percentEncode(string(block)),
		strings.ReplaceAll(cert.Subject.String(), "\"", "\\\""))
}

type statusWriter struct {
	http.ResponseWriter
	status int
	answer bytes.Buffer
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(data []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.answer.Len() < 1024 {
		w.answer.Write(data[:min(len(data), 1024-w.answer.Len())])
	}
	return w.ResponseWriter.Write(data)
}

// gateway is the Istio gateway's part: the TLS layer has verified the client certificate already.
func gateway(upstream *url.URL, rec *recorder) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = r.In.Host
			r.Out.Header.Del(clientCertHeader) // never trust one the client sent
			if rec.forwarding() && r.In.TLS != nil && len(r.In.TLS.VerifiedChains) > 0 {
				r.Out.Header.Set(clientCertHeader, clientCertValue(r.In.TLS.VerifiedChains[0][0]))
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// upstream limits bodies to 16 KiB: reading up to 64 KiB here leaves its limit to decide
		body, err := io.ReadAll(io.LimitReader(r.Body, 64*1024))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w}
		proxy.ServeHTTP(sw, r)
		cn := ""
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			cn = r.TLS.VerifiedChains[0][0].Subject.CommonName
		}
		rec.addRequest(Request{
			Method: r.Method, Path: r.URL.Path, ClientCN: cn, Body: string(body),
			Status: sw.status, Answer: sw.answer.String(),
		})
	})
}

func control(rec *recorder, ready <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ready:
			fmt.Fprintln(w, "ok")
		default:
			http.Error(w, "upstream listener not answering yet", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /record", func(w http.ResponseWriter, _ *http.Request) {
		requests, events := rec.snapshot()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"requests": requests, "events": events})
	})
	mux.HandleFunc("POST /forward-client-cert", func(w http.ResponseWriter, r *http.Request) {
		on := r.URL.Query().Get("on")
		if on != "true" && on != "false" {
			http.Error(w, "on must be true or false", http.StatusBadRequest)
			return
		}
		rec.setForwarding(on == "true")
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	bundle, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// waitUpstream returns once upstream's handler answers on its path (405 to a GET is its answer).
func waitUpstream(ctx context.Context, eventURL string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(eventURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusMethodNotAllowed {
				return nil
			}
			return fmt.Errorf("%s answered %d, not upstream's 405", eventURL, resp.StatusCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not answering: %w", eventURL, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func run() error {
	listen := flag.String("listen", "", "host:port of the mutual TLS endpoint (required)")
	upstreamAddr := flag.String("upstream", "", "loopback host:port for upstream's listener (required)")
	controlAddr := flag.String("control", "", "loopback host:port for the tests' control API (required)")
	component := flag.String("component", "lifecycle-manager", "component name in /v2/<component>/event")
	caFile := flag.String("ca", "", "PEM bundle of the CAs a client certificate must chain to (required)")
	certFile := flag.String("cert", "", "PEM server certificate (required)")
	keyFile := flag.String("key", "", "PEM server private key (required)")
	flag.Parse()
	for name, value := range map[string]string{
		"listen": *listen, "upstream": *upstreamAddr, "control": *controlAddr,
		"ca": *caFile, "cert": *certFile, "key": *keyFile,
	} {
		if value == "" {
			return fmt.Errorf("-%s is required", name)
		}
	}
	config, err := tlsConfig(*caFile, *certFile, *keyFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	logger := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{})
	rec := &recorder{forward: true}

	listener := event.NewSKREventListener(*upstreamAddr, *component)
	listener.Logger = logger.WithName("upstream-listener")
	go func() {
		for evt := range listener.ReceivedEvents() {
			rec.addEvent(decode(evt.Object.Object))
		}
	}()
	upstreamDone := make(chan error, 1)
	go func() { upstreamDone <- listener.Start(ctx) }()

	ready := make(chan struct{})
	controlLn, err := net.Listen("tcp", *controlAddr)
	if err != nil {
		return err
	}
	controlServer := &http.Server{Handler: control(rec, ready), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = controlServer.Serve(controlLn) }()

	waitCtx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	err = waitUpstream(waitCtx, fmt.Sprintf("http://%s/v2/%s/event", *upstreamAddr, *component))
	cancelWait()
	if err != nil {
		return err
	}

	gatewayLn, err := tls.Listen("tcp", *listen, config)
	if err != nil {
		return err
	}
	upstreamURL := &url.URL{Scheme: "http", Host: *upstreamAddr}
	gatewayServer := &http.Server{Handler: gateway(upstreamURL, rec), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = gatewayServer.Serve(gatewayLn) }()
	close(ready)
	logger.Info("ready", "listen", *listen, "upstream", *upstreamAddr, "control", *controlAddr,
		"component", *component)

	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = gatewayServer.Shutdown(shutdown)
	_ = controlServer.Shutdown(shutdown)
	// upstream's Start shuts its server down with the (already cancelled) context it was given
	if err := <-upstreamDone; err != nil && !errors.Is(err, context.Canceled) {
		logger.Info("upstream listener stopped", "error", err.Error())
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream-listener:", err)
		os.Exit(1)
	}
}
