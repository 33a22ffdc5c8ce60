package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/users"
)

// The account console's users: made, reset, disabled and listed by the
// operator. Passwords come from stdin only, and are never printed.

// maxPasswordLine bounds what is read from stdin for a password (the
// service refuses more than 256 characters anyway).
const maxPasswordLine = 4096

// users returns the console users' service, made on first use.
func (c *cli) users() (*users.Service, error) {
	if c.people == nil {
		svc, err := users.New(store.NewUsers(c.db), users.Defaults)
		if err != nil {
			return nil, err
		}
		c.people = svc
	}
	return c.people, nil
}

// readPassword reads a password from stdin: its first line, without the
// line's end. From a terminal it asks for it twice, without echo.
func (c *cli) readPassword() (string, error) {
	if f, ok := c.in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ask := func(prompt string) (string, error) {
			fmt.Fprint(c.errOut, prompt)
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(c.errOut)
			if err != nil {
				return "", fmt.Errorf("read the password: %w", err)
			}
			return string(b), nil
		}
		pw, err := ask("Password: ")
		if err != nil {
			return "", err
		}
		again, err := ask("The password again: ")
		if err != nil {
			return "", err
		}
		if pw != again {
			return "", apperr.New(apperr.Invalid, "the two passwords differ")
		}
		return pw, nil
	}
	if c.in == nil {
		return "", apperr.New(apperr.Invalid, "no password on stdin")
	}
	line, err := bufio.NewReader(io.LimitReader(c.in, maxPasswordLine+1)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	if len(line) > maxPasswordLine {
		return "", apperr.New(apperr.Invalid, "the password's line on stdin is too long")
	}
	if line == "" {
		return "", apperr.New(apperr.Invalid, "no password on stdin: give it as the first line of stdin")
	}
	line = strings.TrimSuffix(line, "\n")
	return strings.TrimSuffix(line, "\r"), nil
}

// byEmail names the email of a user not found.
func byEmail(err error, email string) error {
	if errors.Is(err, store.ErrNoUser) {
		return &apperr.NotFoundError{Kind: "user", By: "email", ID: email}
	}
	return err
}

func (c *cli) printUser(u *account.User) error {
	if c.jsonOut {
		return c.printJSON(u)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\nemail\t%s\naccount\t%s\nadmin\t%t\nstatus\t%s\ncreated\t%s\n",
		u.ID, u.Email, u.AccountID, u.Admin, u.Status, timeText(u.CreatedAt, ""))
	return w.Flush()
}

func (c *cli) userCommands() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Create, list, reset, disable and enable the account console's users"}

	// A user command that changes the user of --email and prints them.
	change := func(use, short string, do func(ctx context.Context, svc *users.Service, email string) (*account.User, error)) *cobra.Command {
		var email string
		sub := &cobra.Command{
			Use: use, Short: short, Args: exactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				if email == "" {
					return usageError{"--email is required"}
				}
				svc, err := c.users()
				if err != nil {
					return err
				}
				u, err := do(cmd.Context(), svc, email)
				if err != nil {
					return byEmail(err, email)
				}
				return c.printUser(u)
			},
		}
		sub.Flags().StringVar(&email, "email", "", "the user's email address")
		return sub
	}
	passwordStdin := func(sub *cobra.Command, on *bool) {
		sub.Flags().BoolVar(on, "password-stdin", false, "read the password from stdin's first line (required: a password is never given on the command line)")
	}
	needPassword := func(on bool) (string, error) {
		if !on {
			return "", usageError{"--password-stdin is required: give the password on stdin, never on the command line"}
		}
		return c.readPassword()
	}

	var acct string
	var admin, createStdin bool
	create := change("create --account ID --email EMAIL --password-stdin [--admin]",
		"Make a console user of an account, with the password read from stdin",
		func(ctx context.Context, svc *users.Service, email string) (*account.User, error) {
			if acct == "" {
				return nil, usageError{"--account is required"}
			}
			pw, err := needPassword(createStdin)
			if err != nil {
				return nil, err
			}
			return svc.Create(ctx, acct, email, pw, admin)
		})
	create.Flags().StringVar(&acct, "account", "", "the account the user signs in to")
	create.Flags().BoolVar(&admin, "admin", false, "the user also sees the console's operator view")
	passwordStdin(create, &createStdin)

	var resetStdin bool
	reset := change("reset-password --email EMAIL --password-stdin",
		"Set a user's password, read from stdin, and sign them out everywhere",
		func(ctx context.Context, svc *users.Service, email string) (*account.User, error) {
			pw, err := needPassword(resetStdin)
			if err != nil {
				return nil, err
			}
			return svc.ResetPassword(ctx, email, pw)
		})
	passwordStdin(reset, &resetStdin)

	status := func(use string, st account.Status, short string) *cobra.Command {
		sub := change(use+" --email EMAIL", short, func(ctx context.Context, svc *users.Service, email string) (*account.User, error) {
			return svc.SetStatus(ctx, email, st)
		})
		return sub
	}

	var on, off bool
	adminCmd := change("admin --email EMAIL --on|--off", "Give (--on) or take (--off) a user's operator view",
		func(ctx context.Context, svc *users.Service, email string) (*account.User, error) {
			if on == off {
				return nil, usageError{"give one of --on, --off"}
			}
			return svc.SetAdmin(ctx, email, on)
		})
	adminCmd.Flags().BoolVar(&on, "on", false, "give the operator view")
	adminCmd.Flags().BoolVar(&off, "off", false, "take the operator view away")

	var listAcct string
	list := &cobra.Command{
		Use: "list --account ID", Short: "List an account's console users, oldest first", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listAcct == "" {
				return usageError{"--account is required"}
			}
			if _, err := c.accounts.Get(cmd.Context(), listAcct); err != nil {
				return err
			}
			all, err := store.NewUsers(c.db).UsersOf(cmd.Context(), listAcct)
			if err != nil {
				return err
			}
			if c.jsonOut {
				if all == nil {
					all = []*account.User{}
				}
				return c.printJSON(all)
			}
			w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tEMAIL\tADMIN\tSTATUS\tCREATED")
			for _, u := range all {
				fmt.Fprintf(w, "%s\t%s\t%t\t%s\t%s\n", u.ID, u.Email, u.Admin, u.Status, timeText(u.CreatedAt, ""))
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&listAcct, "account", "", "account id")

	cmd.AddCommand(create, reset,
		status("disable", account.Disabled, "Disable a user: their sessions end and they cannot sign in"),
		status("enable", account.Active, "Enable a disabled user"),
		adminCmd, list)
	return cmd
}
