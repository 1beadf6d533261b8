package gatewaytest

import (
	"encoding/json"
	"net/http"
	"time"

	"gateway/payments"
	"gateway/psp/fake"
)

// Control is what a test in another language (the browser client's node
// tests) calls to arrange faults and to check what happened:
//
//	POST   /faults {"path": "/confirm", "faults": [Fault…]}  queue faults
//	DELETE /faults                                          drop the queued faults
//	GET    /seen?payment=pay_…                              the requests the proxy saw for a payment
//	POST   /psp/fail {"n": 1}                               the PSP's next charges are lost after it charged (502 psp-outcome-unknown)
//	POST   /psp/hold, GET /psp/arrived, POST /psp/release   hold charges, wait up to 10 s for one, release them
//	GET    /state?payment=pay_…                             the PSP's charges for the payment, its status and confirm keys in the database
func (g *Gateway) Control() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Path   string  `json:"path"`
			Faults []Fault `json:"faults"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.Proxy.Queue(req.Path, req.Faults...)
		reply(w, map[string]bool{"queued": true})
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		g.Proxy.Clear()
		reply(w, map[string]bool{"cleared": true})
	})
	mux.HandleFunc("GET /seen", func(w http.ResponseWriter, r *http.Request) {
		reply(w, g.Proxy.Seen("/payments/"+r.URL.Query().Get("payment")))
	})
	mux.HandleFunc("POST /psp/fail", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N int `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.PSP.FailNextCharges(fake.FaultUnknownAfterCharge, req.N)
		reply(w, map[string]bool{"armed": true})
	})
	mux.HandleFunc("POST /psp/hold", func(w http.ResponseWriter, r *http.Request) {
		g.Hold.Set()
		reply(w, map[string]bool{"holding": true})
	})
	mux.HandleFunc("GET /psp/arrived", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]bool{"arrived": g.Hold.WaitArrival(10 * time.Second)})
	})
	mux.HandleFunc("POST /psp/release", func(w http.ResponseWriter, r *http.Request) {
		g.Hold.Release()
		reply(w, map[string]bool{"released": true})
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("payment")
		var st struct {
			Status          string `db:"status" json:"status"`
			MerchantOrderID string `db:"merchant_order_id" json:"merchant_order_id"`
		}
		if err := g.DB.GetContext(r.Context(), &st, `SELECT status, merchant_order_id FROM payments WHERE id = ?`, id); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var keys []string
		if err := g.DB.SelectContext(r.Context(), &keys, `SELECT idem_key FROM idempotency_keys WHERE endpoint = ? AND subject_id = ?`,
			payments.EndpointConfirmPayment, id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, map[string]any{"status": st.Status, "charges": g.PSP.ChargesFor(st.MerchantOrderID), "confirm_keys": keys})
	})
	return mux
}
