package sendingdomain

import "golang.org/x/net/publicsuffix"

// Record groups.
const (
	GroupDKIM     = "dkim"
	GroupMailFrom = "mail_from"
	GroupDMARC    = "dmarc"
)

// Record is a DNS record the account publishes. Selector ties a DKIM record
// to its key; it is not part of the API shape.
type Record struct {
	Type     string `json:"type"`
	Name     string `json:"name"`
	Value    string `json:"value"`
	Priority int    `json:"priority,omitempty"`
	Group    string `json:"group"`
	Selector string `json:"-"`
}

// MailFromHost is the MAIL FROM subdomain of name.
func MailFromHost(name string) string { return "send." + name }

// DKIMRecord is the TXT record publishing key for domain name.
func DKIMRecord(name string, k Key) Record {
	return Record{Type: "TXT", Name: k.Selector + "._domainkey." + name, Value: "v=DKIM1; k=rsa; p=" + k.PublicKey, Group: GroupDKIM, Selector: k.Selector}
}

// Records lists every record the domain needs published now: the DKIM
// records of every live key (or the legacy CNAMEs), MAIL FROM's MX and SPF,
// and DMARC.
func (s State) Records() []Record {
	var out []Record
	for _, tok := range s.LegacyTokens {
		out = append(out, Record{Type: "CNAME", Name: tok + "._domainkey." + s.Name, Value: tok + ".dkim.amazonses.com", Group: GroupDKIM, Selector: tok})
	}
	for _, k := range s.KeysLive() {
		out = append(out, DKIMRecord(s.Name, k))
	}
	return append(out,
		Record{Type: "MX", Name: s.MailFromDomain, Value: "feedback-smtp." + s.Region + ".amazonses.com", Priority: 10, Group: GroupMailFrom},
		Record{Type: "TXT", Name: s.MailFromDomain, Value: "v=spf1 include:amazonses.com ~all", Group: GroupMailFrom},
		Record{Type: "TXT", Name: "_dmarc." + s.Name, Value: "v=DMARC1; p=none;", Group: GroupDMARC},
	)
}

// SigningRecords are the DKIM records that verify the key in use: the
// active key's TXT record, or the legacy CNAMEs before an upgrade cuts over.
func (s State) SigningRecords() []Record {
	if s.Active != nil {
		return []Record{DKIMRecord(s.Name, *s.Active)}
	}
	var out []Record
	for _, r := range s.Records() {
		if r.Type == "CNAME" {
			out = append(out, r)
		}
	}
	return out
}

// PendingKeyRecord is the record of a key awaiting DNS, if any.
func (s State) PendingKeyRecord() (Record, bool) {
	if t := s.Transition; t != nil && t.State == AwaitingDNS {
		return DKIMRecord(s.Name, t.Key), true
	}
	return Record{}, false
}

// OrganisationalDMARC is the DMARC record name receivers read for name when
// name has none of its own: its organisational domain's (RFC 7489 6.6.3,
// the name below its public suffix). Empty when name is that domain.
func OrganisationalDMARC(name string) string {
	org, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil || org == name {
		return ""
	}
	return "_dmarc." + org
}
