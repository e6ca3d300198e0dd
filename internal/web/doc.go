// Package web is gpuq's read-only dashboard: one page with the queue and why
// each waiting job waits, running jobs by host and GPU, accounts with their
// balances, reservations, caps and fair-share standing, the recent events,
// usage by day as plots, and a page per job with its attempts, charges and
// live output.
//
// It reads only through [client.Client], with the credentials of the
// process that serves it (the scheduler's, or gpuq dev's), so it shows what
// that identity may read and nothing more; [Config.Password] asks every
// request for a password (HTTP Basic) before it shows any of it. It changes
// nothing: every route is a GET, and there are no forms.
//
// Pages are rendered on the server with html/template from embedded
// templates, so every value gpuq did not choose (job commands, environment,
// output, messages) is escaped; plots are inline SVG drawn on the server.
// The page updates live without a reload: a little vanilla JavaScript
// listens to server-sent events (/events), fed by one ordered consumer of
// the events stream ([client.Client.Events]) that [Server.Run] keeps, and
// fetches the affected fragment again. A job's output follows its attempt
// with [client.Client.Logs] on /jobs/{id}/output.
//
// The server keeps no state beyond the recent events and a short-lived
// usage report; it is safe for concurrent use.
//
//	s, err := web.New(web.Config{Client: cl, Logger: log})
//	go s.Run(ctx)                       // follows the events stream
//	err = web.Serve(ctx, l, s.Handler()) // until ctx ends
package web
