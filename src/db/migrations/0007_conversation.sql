CREATE TABLE "assistant_likes" (
	"assistant_id" text NOT NULL,
	"user_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "assistant_likes_assistant_id_user_id_pk" PRIMARY KEY("assistant_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "assistants" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"institution_id" text,
	"owner_user_id" text,
	"name" text NOT NULL,
	"description" text DEFAULT '' NOT NULL,
	"instructions" text DEFAULT '' NOT NULL,
	"picture_url" text DEFAULT '' NOT NULL,
	"liked_count" integer DEFAULT 0 NOT NULL,
	"remember_history" integer DEFAULT 1 NOT NULL,
	"history_count" integer DEFAULT 5 NOT NULL,
	"admin_only" boolean DEFAULT false NOT NULL,
	"institution_shared" boolean DEFAULT false NOT NULL,
	"editable_others" boolean DEFAULT false NOT NULL,
	"argument_1" text DEFAULT '' NOT NULL,
	"argument_2" text DEFAULT '' NOT NULL,
	"argument_3" text DEFAULT '' NOT NULL,
	"argument_4" text DEFAULT '' NOT NULL,
	"argument_5" text DEFAULT '' NOT NULL,
	"rag_collections" text[] DEFAULT '{}'::text[] NOT NULL,
	"assistant_tool_mode" text DEFAULT 'none' NOT NULL,
	"assistant_tools" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "histories" (
	"id" text PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"account_id" text NOT NULL,
	"institution_id" text,
	"assistant_id" text,
	"course_id" bigint,
	"course_name" text,
	"request_id" bigint,
	"input" text DEFAULT '' NOT NULL,
	"inputs" text[] DEFAULT '{}'::text[] NOT NULL,
	"outputs" text[] DEFAULT '{}'::text[] NOT NULL,
	"tool_calls" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"credits" numeric(20, 4) DEFAULT 0 NOT NULL,
	"usage" integer DEFAULT 0 NOT NULL,
	"discount" numeric(7, 4) DEFAULT 0 NOT NULL,
	"favorite" boolean DEFAULT false NOT NULL,
	"forgotten" boolean DEFAULT false NOT NULL,
	"role_id" text DEFAULT '' NOT NULL,
	"role_name" text DEFAULT '' NOT NULL,
	"thumb_up_down" text,
	"feedback" text,
	"conversation_model" text DEFAULT '' NOT NULL,
	"success" boolean NOT NULL,
	"error_code" text,
	"error_message" text,
	"experimental" boolean DEFAULT false NOT NULL,
	"prompt_mode" text DEFAULT 'classic' NOT NULL,
	"streamed" boolean DEFAULT false NOT NULL,
	"streaming_failed" boolean DEFAULT false NOT NULL,
	"query_duration_ms" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "assistant_likes" ADD CONSTRAINT "assistant_likes_assistant_id_assistants_id_fk" FOREIGN KEY ("assistant_id") REFERENCES "public"."assistants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "assistant_likes" ADD CONSTRAINT "assistant_likes_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "assistants" ADD CONSTRAINT "assistants_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "assistants" ADD CONSTRAINT "assistants_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "assistants" ADD CONSTRAINT "assistants_owner_user_id_users_id_fk" FOREIGN KEY ("owner_user_id") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_institution_id_institutions_id_fk" FOREIGN KEY ("institution_id") REFERENCES "public"."institutions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_assistant_id_assistants_id_fk" FOREIGN KEY ("assistant_id") REFERENCES "public"."assistants"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "assistants_institution_idx" ON "assistants" USING btree ("institution_id");--> statement-breakpoint
CREATE INDEX "assistants_account_idx" ON "assistants" USING btree ("account_id");--> statement-breakpoint
CREATE INDEX "assistants_owner_idx" ON "assistants" USING btree ("owner_user_id");--> statement-breakpoint
CREATE INDEX "histories_user_created_idx" ON "histories" USING btree ("user_id","created_at");--> statement-breakpoint
CREATE INDEX "histories_thread_idx" ON "histories" USING btree ("user_id","institution_id","course_id","created_at");--> statement-breakpoint
CREATE INDEX "histories_institution_created_idx" ON "histories" USING btree ("institution_id","created_at");--> statement-breakpoint
CREATE INDEX "histories_feedback_idx" ON "histories" USING btree ("account_id","created_at") WHERE thumb_up_down is not null or feedback is not null;--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_thumb_check" CHECK ("thumb_up_down" IS NULL OR "thumb_up_down" IN ('up', 'down'));--> statement-breakpoint
ALTER TABLE "histories" ADD CONSTRAINT "histories_credits_check" CHECK ("credits" >= 0 AND "usage" >= 0);--> statement-breakpoint
ALTER TABLE "assistants" ADD CONSTRAINT "assistants_liked_count_check" CHECK ("liked_count" >= 0);
