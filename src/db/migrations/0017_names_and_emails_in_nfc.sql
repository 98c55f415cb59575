-- Names and e-mails of accounts, institutions and users are written in NFC from now on (db/values.ts nfc), the
-- form the admin searches put their term in and login looks an e-mail up in; the rows already there are put in
-- it too. A user whose e-mail would then equal another's (lower-cased; the two differ only by NFC/NFD, which was
-- possible before) keeps the e-mail as it is, so that users_email_lower_uq holds: an admin must change one of
-- the two (until then the decomposed one cannot log in, since login looks up the composed spelling).
UPDATE "accounts" SET "name" = normalize("name", NFC), "manager_email" = normalize("manager_email", NFC)
 WHERE "name" IS NOT NFC NORMALIZED OR "manager_email" IS NOT NFC NORMALIZED;--> statement-breakpoint
UPDATE "institutions" SET "name" = normalize("name", NFC), "ainame" = normalize("ainame", NFC), "contact_email" = normalize("contact_email", NFC)
 WHERE "name" IS NOT NFC NORMALIZED OR "ainame" IS NOT NFC NORMALIZED OR "contact_email" IS NOT NFC NORMALIZED;--> statement-breakpoint
UPDATE "users" u SET "fname" = normalize(u."fname", NFC), "lname" = normalize(u."lname", NFC),
       "email" = CASE WHEN EXISTS (SELECT 1 FROM "users" o WHERE o."id" <> u."id" AND lower(normalize(o."email", NFC)) = lower(normalize(u."email", NFC)))
                      THEN u."email" ELSE normalize(u."email", NFC) END
 WHERE u."email" IS NOT NFC NORMALIZED OR u."fname" IS NOT NFC NORMALIZED OR u."lname" IS NOT NFC NORMALIZED;
