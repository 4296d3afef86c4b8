package ses

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mailroom/mailroom/internal/provider"
)

// OwnerTag is the identity tag naming the Mailroom domain id that created
// the identity; only that domain may change or delete it.
const OwnerTag = "mailroom_domain_id"

// CreateIdentity creates the domain identity at SES, tagged with its owner,
// and sets its custom MAIL FROM domain. With a key (BYODKIM) the identity
// signs with that selector and key; without one (legacy) SES manages the
// key (Easy DKIM).
//
// Idempotent: an identity of the same owner that already exists counts as
// created, and for a BYODKIM identity its signing attributes are then set
// again, so a retry after a partial failure converges on the key Mailroom
// holds. An existing identity without an owner tag (made before owners were
// recorded) is taken the same way, and tagged with id.DomainID; one of
// another owner is left untouched (provider.ErrNotOwner). The MAIL FROM
// call is a PUT and may be repeated.
func (p *Provider) CreateIdentity(ctx context.Context, id provider.Identity) error {
	in := &sesv2.CreateEmailIdentityInput{EmailIdentity: aws.String(id.Domain)}
	if id.DomainID != "" {
		in.Tags = []types.Tag{{Key: aws.String(OwnerTag), Value: aws.String(id.DomainID)}}
	}
	byodkim := id.PrivateKey != nil
	if byodkim {
		attrs, err := signingAttributes(id.Selector, id.PrivateKey)
		if err != nil {
			return err
		}
		in.DkimSigningAttributes = attrs
	}
	_, err := p.ses.CreateEmailIdentity(ctx, in)
	var exists *types.AlreadyExistsException
	switch {
	case errors.As(err, &exists):
		if byodkim {
			if err := p.SetSigningKey(ctx, id.DomainID, id.Domain, id.Selector, id.PrivateKey); err != nil {
				return err
			}
		} else if _, err := p.claim(ctx, id.DomainID, id.Domain); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("ses: create identity %s: %w", id.Domain, err)
	}
	if id.MailFromDomain != "" {
		_, err := p.ses.PutEmailIdentityMailFromAttributes(ctx, &sesv2.PutEmailIdentityMailFromAttributesInput{
			EmailIdentity:       aws.String(id.Domain),
			MailFromDomain:      aws.String(id.MailFromDomain),
			BehaviorOnMxFailure: types.BehaviorOnMxFailureUseDefaultValue,
		})
		if err != nil {
			return fmt.Errorf("ses: set MAIL FROM of %s: %w", id.Domain, err)
		}
	}
	return nil
}

// checkOwner reads the identity's owner tag and refuses with
// provider.ErrNotOwner when another domain owns it. It reports whether the
// identity exists.
func (p *Provider) checkOwner(ctx context.Context, domainID, domain string) (bool, error) {
	st, err := p.ownerStatus(ctx, domainID, domain)
	return st.Exists, err
}

// claim is checkOwner that also takes an existing identity without an
// owner (made before owners were recorded) for domainID, tagging it
// (TagResource), so that no other domain of its name may change it after.
// SES has no conditional tag: two domains of one name claiming the same
// identity at the same moment could both go on, the later tag standing.
func (p *Provider) claim(ctx context.Context, domainID, domain string) (bool, error) {
	st, err := p.ownerStatus(ctx, domainID, domain)
	if err == nil && st.Exists && st.Owner == "" && domainID != "" {
		err = p.tagOwner(ctx, domainID, domain)
	}
	return st.Exists, err
}

// ownerStatus is the identity's status, or provider.ErrNotOwner when
// another domain owns it.
func (p *Provider) ownerStatus(ctx context.Context, domainID, domain string) (IdentityStatus, error) {
	st, err := p.GetIdentityStatus(ctx, domain)
	if err != nil {
		return st, err
	}
	if st.Owner != "" && st.Owner != domainID {
		return st, fmt.Errorf("ses: identity %s is owned by domain %s, not %s: %w", domain, st.Owner, domainID, provider.ErrNotOwner)
	}
	return st, nil
}

// tagOwner tags the identity with its owner's domain id.
func (p *Provider) tagOwner(ctx context.Context, domainID, domain string) error {
	resource, err := p.identityARN(ctx, domain)
	if err != nil {
		return err
	}
	_, err = p.ses.TagResource(ctx, &sesv2.TagResourceInput{
		ResourceArn: aws.String(resource),
		Tags:        []types.Tag{{Key: aws.String(OwnerTag), Value: aws.String(domainID)}},
	})
	if err != nil {
		return fmt.Errorf("ses: tag identity %s with its owner: %w", domain, err)
	}
	return nil
}

// identityARN is the ARN of the account's identity domain, which
// TagResource needs and no SES answer gives: the partition and account come
// from STS GetCallerIdentity (allowed to every caller, no IAM permission
// needed), asked once, and the region is the SES client's.
func (p *Provider) identityARN(ctx context.Context, domain string) (string, error) {
	p.arnMu.Lock()
	defer p.arnMu.Unlock()
	if p.arnPrefix == "" {
		out, err := p.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return "", fmt.Errorf("ses: read the account that holds identity %s: %w", domain, err)
		}
		caller, err := arn.Parse(aws.ToString(out.Arn))
		if err != nil {
			return "", fmt.Errorf("ses: read the account that holds identity %s: %w", domain, err)
		}
		p.arnPrefix = arn.ARN{Partition: caller.Partition, Service: "ses", Region: p.ses.Options().Region,
			AccountID: aws.ToString(out.Account), Resource: "identity/"}.String()
	}
	return p.arnPrefix + domain, nil
}

// SetSigningKey makes SES sign the domain's mail with selector and key
// (BYODKIM, origin EXTERNAL), when domainID owns the identity, or no one
// does: domainID then takes it (claim). Used at rotation/upgrade cutover;
// repeating it with the same key is harmless.
func (p *Provider) SetSigningKey(ctx context.Context, domainID, domain, selector string, key *rsa.PrivateKey) error {
	attrs, err := signingAttributes(selector, key)
	if err != nil {
		return err
	}
	exists, err := p.claim(ctx, domainID, domain)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("ses: set signing key of %s: the identity does not exist", domain)
	}
	_, err = p.ses.PutEmailIdentityDkimSigningAttributes(ctx, &sesv2.PutEmailIdentityDkimSigningAttributesInput{
		EmailIdentity:           aws.String(domain),
		SigningAttributesOrigin: types.DkimSigningAttributesOriginExternal,
		SigningAttributes:       attrs,
	})
	if err != nil {
		return fmt.Errorf("ses: set signing key of %s: %w", domain, err)
	}
	return nil
}

// DeleteIdentity removes the domain identity when domainID owns it (or no
// one does); one that does not exist counts as deleted.
func (p *Provider) DeleteIdentity(ctx context.Context, domainID, domain string) error {
	exists, err := p.checkOwner(ctx, domainID, domain)
	if err != nil || !exists {
		return err
	}
	_, err = p.ses.DeleteEmailIdentity(ctx, &sesv2.DeleteEmailIdentityInput{EmailIdentity: aws.String(domain)})
	var notFound *types.NotFoundException
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("ses: delete identity %s: %w", domain, err)
	}
	return nil
}

// IdentityStatus is SES's own view of a domain identity.
type IdentityStatus struct {
	Exists           bool
	VerifiedForSend  bool
	DkimStatus       string // PENDING, SUCCESS, FAILED, TEMPORARY_FAILURE, NOT_STARTED
	MailFromStatus   string // PENDING, SUCCESS, FAILED, TEMPORARY_FAILURE
	VerificationInfo string // SES's last error type, if any
	Owner            string // the OwnerTag, "" on an identity made before owners were recorded
}

// GetIdentityStatus reads the identity's verification state
// (GetEmailIdentity). A missing identity is not an error: Exists is false.
func (p *Provider) GetIdentityStatus(ctx context.Context, domain string) (IdentityStatus, error) {
	out, err := p.ses.GetEmailIdentity(ctx, &sesv2.GetEmailIdentityInput{EmailIdentity: aws.String(domain)})
	var notFound *types.NotFoundException
	if errors.As(err, &notFound) {
		return IdentityStatus{}, nil
	}
	if err != nil {
		return IdentityStatus{}, fmt.Errorf("ses: get identity %s: %w", domain, err)
	}
	st := IdentityStatus{Exists: true, VerifiedForSend: out.VerifiedForSendingStatus}
	if out.DkimAttributes != nil {
		st.DkimStatus = string(out.DkimAttributes.Status)
	}
	if out.MailFromAttributes != nil {
		st.MailFromStatus = string(out.MailFromAttributes.MailFromDomainStatus)
	}
	if out.VerificationInfo != nil {
		st.VerificationInfo = string(out.VerificationInfo.ErrorType)
	}
	for _, t := range out.Tags {
		if aws.ToString(t.Key) == OwnerTag {
			st.Owner = aws.ToString(t.Value)
		}
	}
	return st, nil
}

// signingAttributes encodes a BYODKIM key the way SES expects it: the
// base64 of the key's DER, without PEM armour or line breaks. SES accepts
// PKCS #1 or PKCS #8; this sends PKCS #1 (what `openssl genrsa` writes).
func signingAttributes(selector string, key *rsa.PrivateKey) (*types.DkimSigningAttributes, error) {
	if selector == "" || key == nil {
		return nil, errors.New("ses: BYODKIM needs a selector and a private key")
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return &types.DkimSigningAttributes{
		DomainSigningSelector:   aws.String(selector),
		DomainSigningPrivateKey: aws.String(base64.StdEncoding.EncodeToString(der)),
	}, nil
}

// IdentityVerification reports whether SES itself sees the domain's DKIM
// and MAIL FROM as verified, on an identity domainID owns (another domain's
// identity verifies nothing for it).
func (p *Provider) IdentityVerification(ctx context.Context, domainID, domain string) (dkimOK, mailFromOK bool, err error) {
	st, err := p.GetIdentityStatus(ctx, domain)
	if err != nil || (st.Owner != "" && st.Owner != domainID) {
		return false, false, err
	}
	return st.DkimStatus == "SUCCESS", st.MailFromStatus == "SUCCESS", nil
}
