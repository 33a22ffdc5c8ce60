// Command easelctl is the operator's tool for accounts, API keys, credits
// and the account console's users; it also shows the pool of upstream
// credentials (EASEL_UPSTREAMS_FILE) as the workers share it. It talks to
// Redis (EASEL_REDIS_URL) through the same store code as the gateway, so
// what it changes takes effect on every gateway at once (within the
// gateways' auth cache lifetime, at most 5 s).
//
//	easelctl account create --name NAME [--credits N] [--rate-limit R] [--query-rate-limit R] [--max-inflight N] [--weight W] [--models LIST]
//	easelctl account show ID
//	easelctl account list
//	easelctl account limits ID [--rate-limit R] [--query-rate-limit R] [--max-inflight N] [--weight W] [--models LIST]
//	easelctl account disable|enable ID
//	easelctl key create --account ID [--name N] [--models LIST] [--allowed-ips LIST] [--expires-at TIME] [--spend-limit N]
//	easelctl key limits PREFIX [--name N] [--models LIST] [--allowed-ips LIST] [--expires-at TIME|never] [--spend-limit N]
//	easelctl key list --account ID
//	easelctl key revoke KEY_OR_PREFIX
//	easelctl credits add ID N [--note TEXT]
//	easelctl ledger ID [--limit N]
//	easelctl ledger export ID [--from TIME] [--to TIME]
//	easelctl webhook-secret ID [--rotate]
//	easelctl user create --account ID --email EMAIL --password-stdin [--admin]
//	easelctl user reset-password --email EMAIL --password-stdin
//	easelctl user disable|enable --email EMAIL
//	easelctl user admin --email EMAIL --on|--off
//	easelctl user list --account ID
//	easelctl upstream list
//
// A user's password is read from stdin (its first line; from a terminal,
// without echo), never from the command line, and never printed. A key is
// printed once, when it is made.
//
// Every command takes --json for scripts; errors go to stderr with exit
// status 1 (2 for a usage error).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/users"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Errors reach the operator through easelctl's own messages.
	redisconn.LogTo(zap.NewNop())
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// run executes one command and returns the exit status: 0 on success, 1 on a
// failure, 2 on a usage error. Only the password of a user command is read
// from stdin.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	app := &cli{in: stdin, out: stdout, errOut: stderr, getenv: getenv}
	root := app.commands()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if app.close != nil {
		app.close()
	}
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "easelctl: %v\nRun 'easelctl --help' for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "easelctl: %s\n", describe(err))
	return 1
}

// describe gives the operator the application message, or the error itself
// (an operator may see internal detail: a Redis connection failure, say).
func describe(err error) string {
	if e, ok := apperr.As(err); ok && e.Code != apperr.Internal && e.Message != "" {
		return e.Message
	}
	return err.Error()
}

// exactArgs is cobra.ExactArgs, reporting a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err.Error()}
		}
		return nil
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type cli struct {
	in       io.Reader
	out      io.Writer
	errOut   io.Writer
	getenv   func(string) string
	jsonOut  bool
	redisURL string
	db       *store.DB
	accounts *store.Accounts
	hooks    *store.Hooks
	catalog  *catalog.Catalog
	people   *users.Service // made on first use (it hashes a decoy password)
	close    func()
}

// open connects to Redis on first use.
func (c *cli) open(ctx context.Context) error {
	if c.accounts != nil {
		return nil
	}
	url := c.redisURL
	if url == "" {
		url = c.getenv("EASEL_REDIS_URL")
	}
	if url == "" {
		return usageError{"EASEL_REDIS_URL is not set (or give --redis-url)"}
	}
	family := c.getenv("EASEL_MODEL_FAMILY")
	if family == "" {
		family = "lumen"
	}
	cat, err := catalog.New(family)
	if err != nil {
		return fmt.Errorf("EASEL_MODEL_FAMILY: %w", err)
	}
	rdb, err := redisconn.Open(ctx, url)
	if err != nil {
		return err
	}
	db := store.NewDB(rdb, store.Options{})
	c.db, c.accounts, c.hooks, c.catalog, c.close = db, store.NewAccounts(db), store.NewHooks(db), cat, func() { _ = rdb.Close() }
	return nil
}

func (c *cli) commands() *cobra.Command {
	root := &cobra.Command{
		Use:           "easelctl",
		Short:         "Manage Easel accounts, API keys, credits and console users",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.DisableFlagParsing {
				return nil // the command parses its own flags, then connects
			}
			if cmd.Annotations[noRedis] != "" {
				return nil
			}
			return c.open(cmd.Context())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	root.PersistentFlags().BoolVar(&c.jsonOut, "json", false, "print JSON")
	root.PersistentFlags().StringVar(&c.redisURL, "redis-url", "", "Redis URL (default $EASEL_REDIS_URL)")
	root.AddCommand(c.accountCommands(), c.creditsCommands(), c.keyCommands(), c.ledgerCommand(), c.webhookSecretCommand(), c.userCommands(), c.upstreamCommands(), c.probeCommand())
	return root
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) tiers(s string) ([]catalog.Tier, error) {
	var out []catalog.Tier
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" || m == "all" {
			continue
		}
		t, ok := c.catalog.ParseTier(m)
		if !ok {
			return nil, usageError{fmt.Sprintf("unknown model %q: use standard, pro, all or a model id (%s)", m, c.catalog.IDs())}
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func limitText(v int) string {
	if v == 0 {
		return "default"
	}
	return strconv.Itoa(v)
}

func modelsText(ts []catalog.Tier) string {
	if len(ts) == 0 {
		return "all"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

func (c *cli) printAccount(a *account.Account) error {
	if c.jsonOut {
		return c.printJSON(a)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\nname\t%s\nstatus\t%s\ncredits\t%d\nmodels\t%s\nrate limit\t%s /s per key\nquery rate limit\t%s /s per key\nmax in flight\t%s\nweight\t%d\ncreated\t%s\n",
		a.ID, a.Name, a.Status, a.Credits, modelsText(a.Models), limitText(a.RateLimit), limitText(a.QueryRateLimit), limitText(a.MaxInflight), max(a.Weight, 1), a.CreatedAt.UTC().Format(time.RFC3339))
	return w.Flush()
}

func (c *cli) accountCommands() *cobra.Command {
	cmd := &cobra.Command{Use: "account", Short: "Create, show, list, limit, disable and enable accounts"}

	var n account.Spec
	var models string
	create := &cobra.Command{
		Use:   "create --name NAME [--credits N] [--rate-limit PER_SECOND] [--max-inflight N] [--weight W]",
		Short: "Create an account and print its id",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n.Name == "" {
				return usageError{"--name is required"}
			}
			var err error
			if n.Models, err = c.tiers(models); err != nil {
				return err
			}
			a, err := c.accounts.Create(cmd.Context(), n)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(a)
			}
			fmt.Fprintln(c.out, a.ID)
			return nil
		},
	}
	create.Flags().StringVar(&n.Name, "name", "", "account name")
	create.Flags().Int64Var(&n.Credits, "credits", 0, "initial credits")
	create.Flags().IntVar(&n.RateLimit, "rate-limit", 0, "task creations per second per key (0: the deployment default)")
	create.Flags().IntVar(&n.QueryRateLimit, "query-rate-limit", 0, "queries per second per key (0: the deployment default)")
	create.Flags().IntVar(&n.MaxInflight, "max-inflight", 0, "tasks pending or processing at once (0: the deployment default)")
	create.Flags().IntVar(&n.Weight, "weight", 0, "its share of the workers, as a multiple of EASEL_ACCOUNT_MAX_RUNNING (1 to 100; 0: 1)")
	create.Flags().StringVar(&models, "models", "all", "models the account may use: all, or a comma list of standard, pro or model ids")

	show := &cobra.Command{
		Use: "show ID", Short: "Show an account", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := c.accounts.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.printAccount(a)
		},
	}

	list := &cobra.Command{
		Use: "list", Short: "List accounts", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := c.accounts.List(cmd.Context())
			if err != nil {
				return err
			}
			if c.jsonOut {
				if all == nil {
					all = []*account.Account{}
				}
				return c.printJSON(all)
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tSTATUS\tCREDITS\tMODELS\tRATE\tQUERY RATE\tMAX IN FLIGHT")
			for _, a := range all {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.ID, a.Name, a.Status, a.Credits, modelsText(a.Models), limitText(a.RateLimit), limitText(a.QueryRateLimit), limitText(a.MaxInflight))
			}
			return w.Flush()
		},
	}

	var rate, qrate, inflight, weight int
	var limitModels string
	limits := &cobra.Command{
		Use:   "limits ID [--rate-limit PER_SECOND] [--query-rate-limit PER_SECOND] [--max-inflight N] [--weight W] [--models LIST]",
		Short: "Change an account's limits (0: back to the deployment default)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var l account.LimitsUpdate
			if cmd.Flags().Changed("rate-limit") {
				l.RateLimit = &rate
			}
			if cmd.Flags().Changed("query-rate-limit") {
				l.QueryRateLimit = &qrate
			}
			if cmd.Flags().Changed("max-inflight") {
				l.MaxInflight = &inflight
			}
			if cmd.Flags().Changed("weight") {
				l.Weight = &weight
			}
			if cmd.Flags().Changed("models") {
				ts, err := c.tiers(limitModels)
				if err != nil {
					return err
				}
				l.Models = &ts
			}
			if l == (account.LimitsUpdate{}) {
				return usageError{"give at least one of --rate-limit, --query-rate-limit, --max-inflight, --weight, --models"}
			}
			a, err := c.accounts.SetLimits(cmd.Context(), args[0], l)
			if err != nil {
				return err
			}
			return c.printAccount(a)
		},
	}
	limits.Flags().IntVar(&rate, "rate-limit", 0, "task creations per second per key")
	limits.Flags().IntVar(&qrate, "query-rate-limit", 0, "queries per second per key")
	limits.Flags().IntVar(&inflight, "max-inflight", 0, "tasks pending or processing at once")
	limits.Flags().IntVar(&weight, "weight", 0, "its share of the workers, as a multiple of EASEL_ACCOUNT_MAX_RUNNING (1 to 100; 0: 1)")
	limits.Flags().StringVar(&limitModels, "models", "", "models the account may use: all, or a comma list")

	status := func(use string, st account.Status, short string) *cobra.Command {
		return &cobra.Command{
			Use: use + " ID", Short: short, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := c.accounts.SetStatus(cmd.Context(), args[0], st); err != nil {
					return err
				}
				a, err := c.accounts.Get(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return c.printAccount(a)
			},
		}
	}
	cmd.AddCommand(create, show, list, limits,
		status("disable", account.Disabled, "Disable an account: its keys stop working (403)"),
		status("enable", account.Active, "Enable a disabled account"))
	return cmd
}

func (c *cli) creditsCommands() *cobra.Command {
	cmd := &cobra.Command{Use: "credits", Short: "Change credit balances"}
	var note string
	add := &cobra.Command{
		Use:   "add ID N [--note TEXT]",
		Short: "Add N credits (negative for a correction; never below 0) and print the new balance",
		// N may be negative, which flag parsing would take for a flag.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			var pos []string
			for i := 0; i < len(args); i++ {
				switch a := args[i]; {
				case a == "-h" || a == "--help":
					return cmd.Help()
				case a == "--json":
					c.jsonOut = true
				case a == "--note" && i+1 < len(args):
					note = args[i+1]
					i++
				case strings.HasPrefix(a, "--note="):
					note = strings.TrimPrefix(a, "--note=")
				case strings.HasPrefix(a, "--redis-url="):
					c.redisURL = strings.TrimPrefix(a, "--redis-url=")
				case a == "--redis-url" && i+1 < len(args):
					c.redisURL = args[i+1]
					i++
				default:
					pos = append(pos, a)
				}
			}
			if len(pos) != 2 {
				return usageError{"usage: easelctl credits add ID N [--note TEXT]"}
			}
			n, err := strconv.ParseInt(pos[1], 10, 64)
			if err != nil {
				return usageError{fmt.Sprintf("N %q: want an integer", pos[1])}
			}
			if err := c.open(cmd.Context()); err != nil {
				return err
			}
			bal, err := c.accounts.AddCredits(cmd.Context(), pos[0], n, note)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]int64{"balance": bal})
			}
			fmt.Fprintln(c.out, bal)
			return nil
		},
	}
	cmd.AddCommand(add)
	return cmd
}

func (c *cli) keyCommands() *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "Create, list, limit and revoke API keys"}

	var acct string
	var spec keyFlags
	create := &cobra.Command{
		Use:   "create --account ID [--name N] [--models LIST] [--allowed-ips LIST] [--expires-at TIME] [--spend-limit N]",
		Short: "Create an API key and print it (it is shown only this once); its name and limits go to stderr",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if acct == "" {
				return usageError{"--account is required"}
			}
			u, err := c.keyUpdate(cmd, &spec)
			if err != nil {
				return err
			}
			key, k, err := c.accounts.NewKey(cmd.Context(), acct, u.Spec())
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(struct {
					Secret string `json:"key"`
					*account.Key
				}{key, k})
			}
			// The key alone on stdout, so that KEY=$(easelctl key create ...)
			// still works; what it may do beside it, on stderr.
			fmt.Fprintln(c.out, key)
			fmt.Fprintln(c.errOut, "Keep the key above: it is shown only this once.")
			return writeKey(c.errOut, k)
		},
	}
	create.Flags().StringVar(&acct, "account", "", "account id")
	spec.define(create, false)

	var upd keyFlags
	limits := &cobra.Command{
		Use:   "limits KEY_OR_PREFIX [--name N] [--models LIST] [--allowed-ips LIST] [--expires-at TIME|never] [--spend-limit N]",
		Short: "Rename a key or change its limits (only what is given changes) and print it",
		Long: "Rename a key or change its limits: only the flags given change. --models \"\" (or all) gives the key its account's models again, " +
			"--allowed-ips \"\" any address, --expires-at never no expiry, --spend-limit 0 no spend limit.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := c.keyUpdate(cmd, &upd)
			if err != nil {
				return err
			}
			if u.Empty() {
				return usageError{"give at least one of --name, --models, --allowed-ips, --expires-at, --spend-limit"}
			}
			k, err := c.accounts.UpdateKey(cmd.Context(), "", args[0], u)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(k)
			}
			return writeKey(c.out, k)
		},
	}
	upd.define(limits, true)

	var listAcct string
	list := &cobra.Command{
		Use: "list --account ID", Short: "List an account's keys (prefixes only) with their names, state, spend and limits", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listAcct == "" {
				return usageError{"--account is required"}
			}
			keys, err := c.accounts.Keys(cmd.Context(), listAcct)
			if err != nil {
				return err
			}
			if c.jsonOut {
				if keys == nil {
					keys = []*account.Key{}
				}
				return c.printJSON(keys)
			}
			now := time.Now()
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PREFIX\tNAME\tSTATUS\tCREATED\tLAST USED\tSPENT\tSPEND LIMIT\tMODELS\tALLOWED IPS\tEXPIRES")
			for _, k := range keys {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", k.Prefix, orDash(k.Name), keyStatusText(k, now), timeText(k.CreatedAt, ""),
					timeText(k.LastUsedAt, "never"), k.Spent, spendLimitText(k.SpendLimit), keyModelsText(k.Models), ipsText(k.AllowedIPs), timeText(k.ExpiresAt, "never"))
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&listAcct, "account", "", "account id")

	revoke := &cobra.Command{
		Use: "revoke KEY_OR_PREFIX", Short: "Revoke a key, given whole or by its listed prefix", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := c.accounts.RevokeKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(k)
			}
			fmt.Fprintf(c.out, "revoked %s (account %s)\n", k.Prefix, k.AccountID)
			return nil
		},
	}
	cmd.AddCommand(create, limits, list, revoke)
	return cmd
}

// keyFlags are a key's name and limits as flags.
type keyFlags struct {
	name, models, ips, expires string
	spendLimit                 int64
}

// define adds the flags to cmd; change: for a change of an existing key.
func (f *keyFlags) define(cmd *cobra.Command, change bool) {
	models, ips, expires, limit := "the account's", "any", "never", "none"
	if change {
		models, ips, expires, limit = `"" or all: the account's`, `"": any`, "never: no expiry", "0: none"
	}
	cmd.Flags().StringVar(&f.name, "name", "", "what the key is for (at most 100 characters)")
	cmd.Flags().StringVar(&f.models, "models", "", "models the key may use, within its account's: a comma list of standard, pro or model ids ("+models+")")
	cmd.Flags().StringVar(&f.ips, "allowed-ips", "", "client addresses the key is accepted from: a comma list of IP addresses and CIDR prefixes ("+ips+")")
	cmd.Flags().StringVar(&f.expires, "expires-at", "", "when the key stops working: an RFC 3339 time (2027-01-31T00:00:00Z) or a date, midnight UTC ("+expires+")")
	cmd.Flags().Int64Var(&f.spendLimit, "spend-limit", 0, "the credits the key's tasks may cost in all ("+limit+")")
}

// keyUpdate reads the flags of cmd that were given: nil fields were not.
func (c *cli) keyUpdate(cmd *cobra.Command, f *keyFlags) (account.KeyUpdate, error) {
	var u account.KeyUpdate
	set := cmd.Flags().Changed
	if set("name") {
		u.Name = &f.name
	}
	if set("models") {
		ts, err := c.tiers(f.models)
		if err != nil {
			return u, err
		}
		if ts == nil {
			ts = []catalog.Tier{}
		}
		u.Models = &ts
	}
	if set("allowed-ips") {
		ips, err := account.ParseAllowedIPs(strings.Split(f.ips, ","))
		if err != nil {
			return u, err
		}
		u.AllowedIPs = &ips
	}
	if set("expires-at") {
		var t time.Time
		if s := strings.TrimSpace(f.expires); s != "never" && s != "" {
			var err error
			if t, err = parseTime(s); err != nil {
				return u, usageError{"--expires-at: " + err.Error() + ", or never"}
			}
		}
		u.ExpiresAt = &t
	}
	if set("spend-limit") {
		u.SpendLimit = &f.spendLimit
	}
	return u, nil
}

// writeKey writes a key's state and limits, one per line.
func writeKey(out io.Writer, k *account.Key) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "prefix\t%s\naccount\t%s\nname\t%s\nstatus\t%s\ncreated\t%s\nlast used\t%s\nspent\t%d\nspend limit\t%s\nmodels\t%s\nallowed ips\t%s\nexpires\t%s\n",
		k.Prefix, k.AccountID, orDash(k.Name), keyStatusText(k, time.Now()), timeText(k.CreatedAt, ""), timeText(k.LastUsedAt, "never"),
		k.Spent, spendLimitText(k.SpendLimit), keyModelsText(k.Models), ipsText(k.AllowedIPs), timeText(k.ExpiresAt, "never"))
	return w.Flush()
}

func keyStatusText(k *account.Key, now time.Time) string {
	if k.Revoked {
		return account.KeyRevoked + " " + timeText(k.RevokedAt, "")
	}
	return k.Status(now)
}

func keyModelsText(ts []catalog.Tier) string {
	if len(ts) == 0 {
		return "the account's"
	}
	return modelsText(ts)
}

func ipsText(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "any"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func spendLimitText(n int64) string {
	if n == 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

func timeText(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) ledgerCommand() *cobra.Command {
	var limit int64
	cmd := &cobra.Command{
		Use: "ledger ID [--limit N]", Short: "Print an account's credit movements, newest first", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := c.accounts.Ledger(cmd.Context(), args[0], limit)
			if err != nil {
				return err
			}
			if c.jsonOut {
				if entries == nil {
					entries = []account.LedgerEntry{}
				}
				return c.printJSON(entries)
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TIME\tKIND\tAMOUNT\tBALANCE\tTASK\tNOTE")
			for _, e := range entries {
				fmt.Fprintf(w, "%s\t%s\t%+d\t%d\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339Nano), e.Kind, e.Amount, e.Balance, e.TaskID, e.Note)
			}
			return w.Flush()
		},
	}
	cmd.Flags().Int64Var(&limit, "limit", 100, "how many entries")
	cmd.AddCommand(c.ledgerExportCommand())
	return cmd
}

// ledgerExportCommand writes an account's ledger entries of a time range,
// oldest first, as JSON Lines: what an operator keeps of what they bill
// before EASEL_LEDGER_RETENTION drops it.
func (c *cli) ledgerExportCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "export ID [--from TIME] [--to TIME]",
		Short: "Write an account's credit movements from --from (inclusive) to --to (exclusive), oldest first, as JSON Lines",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var start, end time.Time
			var err error
			if from != "" {
				if start, err = parseTime(from); err != nil {
					return usageError{"--from: " + err.Error()}
				}
			}
			if to != "" {
				if end, err = parseTime(to); err != nil {
					return usageError{"--to: " + err.Error()}
				}
			}
			enc := json.NewEncoder(c.out)
			return c.accounts.LedgerRange(cmd.Context(), args[0], start, end, func(e account.LedgerEntry) error {
				return enc.Encode(e)
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the first time, RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01); default: the oldest entry kept")
	cmd.Flags().StringVar(&to, "to", "", "the end, exclusive, in the same forms; default: now")
	return cmd
}

// parseTime reads an RFC 3339 time or a date (midnight UTC).
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time or a date (2026-11-01)", s)
	}
	return t, nil
}

func (c *cli) webhookSecretCommand() *cobra.Command {
	var rotate bool
	cmd := &cobra.Command{
		Use:   "webhook-secret ID [--rotate]",
		Short: "Print an account's webhook signing secret (made on first use); --rotate replaces it, the old one signing beside it for 24 h",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			out := map[string]any{"account_id": id}
			if rotate {
				secret, until, err := c.hooks.RotateSecret(cmd.Context(), id)
				if err != nil {
					return err
				}
				out["secret"], out["previous_valid_until"] = secret, until.UnixMilli()
			} else {
				secret, err := c.hooks.Secret(cmd.Context(), id)
				if err != nil {
					return err
				}
				out["secret"] = secret
			}
			if c.jsonOut {
				return c.printJSON(out)
			}
			fmt.Fprintln(c.out, out["secret"])
			return nil
		},
	}
	cmd.Flags().BoolVar(&rotate, "rotate", false, "replace the secret; the old one still signs deliveries for 24 hours")
	return cmd
}
