package redisconn

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/easelhq/easel/tools/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

func TestKinds(t *testing.T) {
	tests := []struct {
		url  string
		kind Kind
		ok   bool
		// what New makes of it
		client string
	}{
		{"redis://127.0.0.1:6379/0", Single, true, "*redis.Client"},
		{"rediss://user:pw@cache.example.com:6380/2", Single, true, "*redis.Client"},
		{"redis://10.0.0.1:7000?addr=10.0.0.2:7001&addr=10.0.0.3:7002", Cluster, true, "*redis.ClusterClient"},
		{"redis://:secret@10.0.0.1:7000?addr=10.0.0.2:7001", Cluster, true, "*redis.ClusterClient"},
		{"redis://10.0.0.1:26379?master_name=easel&addr=10.0.0.2:26379&addr=10.0.0.3:26379", Sentinel, true, "*redis.Client"},
		{"redis://10.0.0.1:26379?master_name=easel&password=primary-secret", Sentinel, true, "*redis.Client"},
		{"redis://10.0.0.1:26379?master_name=&addr=10.0.0.2:26379", "", false, ""},
		{"redis://h1:7000,h2:7001", "", false, ""}, // go-redis would take this for one odd address
		{"http://localhost:6379", "", false, ""},
		{"redis://", "", false, ""},
		{"redis://10.0.0.1:7000?addr=10.0.0.2", Cluster, true, "error"}, // a seed without a port
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			kind, err := KindOf(tt.url)
			if (err == nil) != tt.ok || kind != tt.kind {
				t.Fatalf("KindOf = %q, %v; want %q (ok %v)", kind, err, tt.kind, tt.ok)
			}
			if !tt.ok {
				if _, err := New(tt.url, Options{}); err == nil {
					t.Error("New accepted it")
				}
				return
			}
			c, err := New(tt.url, Options{PoolSize: 7})
			if tt.client == "error" {
				if err == nil {
					t.Error("New accepted it")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := fmt.Sprintf("%T", c); got != tt.client {
				t.Errorf("client %s; want %s", got, tt.client)
			}
			switch c := c.(type) {
			case *redis.ClusterClient:
				if o := c.Options(); !o.ContextTimeoutEnabled || o.PoolSize != 7 || o.ReadTimeout != DefaultTimeout {
					t.Errorf("cluster options %+v", o)
				}
			case *redis.Client:
				if o := c.Options(); !o.ContextTimeoutEnabled || o.PoolSize != 7 || o.ReadTimeout != DefaultTimeout {
					t.Errorf("options %+v", o)
				}
			}
		})
	}
}

// A client names its connections, so CLIENT LIST shows which process holds
// each (the Sentinel end-to-end test relies on it too).
func TestClientName(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := New(srv.URL, Options{ClientName: "gateway:host:42"})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	list, err := srv.Client(t).ClientList(ctx).Result()
	if err != nil || !strings.Contains(list, " name=gateway:host:42 ") {
		t.Errorf("CLIENT LIST has no connection named gateway:host:42: %q, %v", list, err)
	}
}
