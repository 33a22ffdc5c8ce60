package config

import (
	"testing"

	"github.com/easelhq/easel/pkg/blob"
	"github.com/easelhq/easel/tools/testkit/configtest"
)

func environ(kv ...string) map[string]string {
	return configtest.Env(map[string]string{"EASEL_REDIS_URL": "redis://localhost:6379/0"}, kv...)
}

func load(env map[string]string) (Common, error) {
	c, err := Parse[Common](env)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestCommonDefaults(t *testing.T) {
	c, err := load(environ())
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelFamily != "lumen" || c.BlobURL != "file://"+DefaultBlobDir() || c.FetchAllowPrivate || c.LogFormat != "json" || c.ShutdownTimeout.String() != "15s" {
		t.Errorf("defaults: %+v", c)
	}
}

func TestCommonErrors(t *testing.T) {
	configtest.Run(t, func(env map[string]string) error { _, err := load(env); return err }, []configtest.Case{
		{Name: "valid", Env: environ(), Want: ""},
		{Name: "no redis url", Env: environ("EASEL_REDIS_URL", configtest.Unset), Want: "EASEL_REDIS_URL is required"},
		{Name: "bad redis scheme", Env: environ("EASEL_REDIS_URL", "http://localhost:6379"), Want: "EASEL_REDIS_URL"},
		{Name: "a cluster", Env: environ("EASEL_REDIS_URL", "redis://10.0.0.1:7000?addr=10.0.0.2:7001&addr=10.0.0.3:7002"), Want: ""},
		{Name: "sentinels", Env: environ("EASEL_REDIS_URL", "redis://10.0.0.1:26379?master_name=easel&addr=10.0.0.2:26379"), Want: ""},
		{Name: "sentinels without a master name", Env: environ("EASEL_REDIS_URL", "redis://10.0.0.1:26379?master_name="), Want: "master_name is empty"},
		{Name: "comma-separated hosts", Env: environ("EASEL_REDIS_URL", "redis://h1:7000,h2:7001"), Want: "addr="},
		{Name: "redis password not echoed", Env: environ("EASEL_REDIS_URL", "mysql://u:hunter2@h:1"), Want: "EASEL_REDIS_URL"},
		{Name: "bad family", Env: environ("EASEL_MODEL_FAMILY", "Lumen"), Want: "EASEL_MODEL_FAMILY"},
		{Name: "bad bool", Env: environ("EASEL_FETCH_ALLOW_PRIVATE", "maybe"), Want: "EASEL_FETCH_ALLOW_PRIVATE: cannot parse as true or false"},
		{Name: "bad duration", Env: environ("EASEL_SHUTDOWN_TIMEOUT", "10"), Want: "EASEL_SHUTDOWN_TIMEOUT: cannot parse as a Go duration"},
		{Name: "bad port", Env: environ("EASEL_FETCH_PORTS", "80,70000"), Want: "EASEL_FETCH_PORTS"},
		{Name: "bad cidr", Env: environ("EASEL_FETCH_ALLOW_CIDRS", "10.0.0.0/99"), Want: "EASEL_FETCH_ALLOW_CIDRS"},
		{Name: "bad log format", Env: environ("EASEL_LOG_FORMAT", "xml"), Want: "EASEL_LOG_FORMAT"},
		{Name: "bad log level", Env: environ("EASEL_LOG_LEVEL", "loud"), Want: "EASEL_LOG_LEVEL"},
		{Name: "bad pprof addr", Env: environ("EASEL_PPROF_ADDR", "6060"), Want: "EASEL_PPROF_ADDR"},
		{Name: "a bucket", Env: environ("EASEL_BLOB_URL", "s3://easel-results/prod", "EASEL_S3_ENDPOINT", "https://s3.example.com"), Want: ""},
		{Name: "bad blob scheme", Env: environ("EASEL_BLOB_URL", "gs://bucket"), Want: "EASEL_BLOB_URL"},
		{Name: "blob url with a secret", Env: environ("EASEL_BLOB_URL", "s3://AKIA:hunter2@bucket"), Want: "EASEL_BLOB_URL"},
		{Name: "bad s3 endpoint", Env: environ("EASEL_BLOB_URL", "s3://bucket", "EASEL_S3_ENDPOINT", "minio:9000"), Want: "EASEL_S3_ENDPOINT"},
		{Name: "s3 endpoint with a secret", Env: environ("EASEL_BLOB_URL", "s3://bucket", "EASEL_S3_ENDPOINT", "http://u:hunter2@minio:9000"), Want: "EASEL_S3_ENDPOINT"},
		{Name: "half the s3 credentials", Env: environ("EASEL_BLOB_URL", "s3://bucket", "EASEL_S3_SECRET_ACCESS_KEY", "hunter2"), Want: "EASEL_S3_ACCESS_KEY_ID and EASEL_S3_SECRET_ACCESS_KEY"},
	}, "hunter2")
}

// TestBlobConfig: the three ways to name the result store end in one URL,
// and the S3 settings reach the store's options.
func TestBlobConfig(t *testing.T) {
	for _, tt := range []struct {
		name     string
		env      map[string]string
		url, dir string
	}{
		{"default", environ(), "file://" + DefaultBlobDir(), DefaultBlobDir()},
		// The older EASEL_BLOB_DIR is read no more.
		{"EASEL_BLOB_DIR", environ("EASEL_BLOB_DIR", "/var/lib/easel"), "file://" + DefaultBlobDir(), DefaultBlobDir()},
		{"file url", environ("EASEL_BLOB_URL", "file:///srv/results/"), "file:///srv/results/", "/srv/results"},
		{"bucket", environ("EASEL_BLOB_URL", "s3://easel-results/prod", "EASEL_S3_ENDPOINT", "http://minio:9000", "EASEL_S3_PATH_STYLE", "true",
			"EASEL_S3_REGION", "eu-west-1", "EASEL_S3_ACCESS_KEY_ID", "id", "EASEL_S3_SECRET_ACCESS_KEY", "secret"), "s3://easel-results/prod", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			b := c.BlobConfig()
			loc, err := blob.ParseURL(b.URL)
			if err != nil || b.URL != tt.url || loc.Dir != tt.dir {
				t.Errorf("BlobConfig().URL %q (directory %q, %v); want %q, %q", b.URL, loc.Dir, err, tt.url, tt.dir)
			}
			if tt.name == "bucket" && (b.S3.Endpoint != "http://minio:9000" || !b.S3.PathStyle || b.S3.Region != "eu-west-1" || b.S3.AccessKeyID != "id" || b.S3.SecretAccessKey != "secret") {
				t.Errorf("S3 options %+v", b.S3)
			}
		})
	}
}

func TestNames(t *testing.T) {
	names := Names(&Common{})
	for _, want := range []string{"EASEL_REDIS_URL", "EASEL_BLOB_URL", "EASEL_FETCH_ALLOW_PRIVATE", "EASEL_MODEL_FAMILY", "EASEL_LOG_LEVEL"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("Names() lacks %s", want)
		}
	}
}
