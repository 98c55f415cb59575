CREATE TABLE "memory_params" (
	"id" text PRIMARY KEY NOT NULL,
	"author_user_id" text NOT NULL,
	"institution_id" text,
	"key_name" text NOT NULL,
	"key_value" text NOT NULL,
	"key_description" text DEFAULT '' NOT NULL,
	"key_namespace" text DEFAULT 'default' NOT NULL,
	"shared" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "settings" (
	"id" text PRIMARY KEY NOT NULL,
	"institution_id" text NOT NULL,
	"user_id" text,
	"key" text NOT NULL,
	"value" text,
	"status" text DEFAULT 'active' NOT NULL,
	"admin_only" boolean DEFAULT false NOT NULL,
	"institution_shared" boolean DEFAULT true NOT NULL,
	"editable_others" boolean DEFAULT false NOT NULL,
	"version" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sso_providers" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"type" text NOT NULL,
	"issuer" text NOT NULL,
	"token_endpoint" text NOT NULL,
	"client_id" text NOT NULL,
	"client_secret_sealed" text,
	"created_by" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "memory_params" ADD CONSTRAINT "memory_params_author_user_id_users_id_fk" FOREIGN KEY ("author_user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_params" ADD CONSTRAINT "memory_params_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "settings" ADD CONSTRAINT "settings_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "settings" ADD CONSTRAINT "settings_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "memory_params_author_idx" ON "memory_params" USING btree ("author_user_id","created_at");--> statement-breakpoint
CREATE INDEX "memory_params_institution_idx" ON "memory_params" USING btree ("institution_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "settings_institution_key_uq" ON "settings" USING btree ("institution_id","key");--> statement-breakpoint
CREATE INDEX "sso_providers_account_idx" ON "sso_providers" USING btree ("account_id");--> statement-breakpoint
-- A shared memory row belongs to exactly one institution; a personal row to none.
ALTER TABLE "memory_params" ADD CONSTRAINT "memory_params_shared_has_institution" CHECK ("shared" = ("institution_id" IS NOT NULL));
